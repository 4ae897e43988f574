/**
 * Worker events. A worker is a daemon on one host; it registers its inventory when it starts
 * and leaves when it stops. Liveness is not an event: it rides the heartbeat stream, and the
 * watchdog turns silence into `WorkerLost`.
 */
import { z } from 'zod';

export const GpuSchema = z.object({
  index: z.number().int().min(0),
  name: z.string(),
  uuid: z.string(),
  vramBytes: z.number().int().positive(),
  simulated: z.boolean(),
});
export type Gpu = z.infer<typeof GpuSchema>;

export const WorkerRegistered = z.object({
  type: z.literal('WorkerRegistered'),
  data: z.object({
    name: z.string().min(1),
    hostname: z.string(),
    /**
     * Where the members of a gang job on other workers reach the member it runs
     * (`MASTER_ADDR`): a host name or an IP address. Absent: its `hostname`.
     */
    address: z
      .string()
      .max(255)
      .regex(/^[A-Za-z0-9][A-Za-z0-9.:-]*$/, 'a host name or an IP address')
      .optional(),
    gpus: z.array(GpuSchema),
    cpuSlots: z.number().int().min(0),
    /**
     * The host's memory, which placement shares out among the attempts by what each needs.
     * Absent from a worker of a version before it was counted: its memory is not.
     */
    memoryBytes: z.number().int().positive().optional(),
    /**
     * Whether it holds an attempt's `memoryGb` as a hard limit (the Docker runtime; the process
     * runtime where the host lets it make memory cgroups). Absent: only a Docker worker does.
     */
    limitsMemory: z.boolean().optional(),
    runtime: z.string(),
    version: z.string(),
    /** The newest dispatch contract it reads; absent from a worker that reads only version 1. */
    dispatchVersion: z.number().int().min(1).optional(),
    /** Attempts the worker still runs as it (re)registers; any other attempt on it is gone. */
    runningAttempts: z.array(z.string()).default([]),
  }),
});

export const WorkerLeft = z.object({
  type: z.literal('WorkerLeft'),
  data: z.object({ reason: z.string() }),
});

export const WorkerLost = z.object({
  type: z.literal('WorkerLost'),
  data: z.object({
    lastSeenAt: z.iso.datetime().nullable(),
    timeoutMs: z.number().int(),
    /** An admin revoked the worker's key: it is cut off, not silent. */
    revoked: z.literal(true).optional(),
  }),
});

export const WorkerEventSchema = z.discriminatedUnion('type', [
  WorkerRegistered,
  WorkerLeft,
  WorkerLost,
]);
export type WorkerEvent = z.infer<typeof WorkerEventSchema>;

/** What a worker reports on every heartbeat: not an event, the latest one is all that matters. */
export const HeartbeatSchema = z.object({
  workerId: z.string(),
  at: z.iso.datetime(),
  gpus: z.array(
    z.object({ index: z.number().int(), usedBytes: z.number().int(), utilPct: z.number() }),
  ),
  runningAttempts: z.array(z.string()),
});
export type Heartbeat = z.infer<typeof HeartbeatSchema>;
