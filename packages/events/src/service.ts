/**
 * Services: jobs of `kind: "service"` (a notebook server, an inference server) that run until
 * stopped. Each attempt is given ports from a range on its worker, may be watched by a health
 * check, and is started again, elsewhere if need be, whenever it ends by itself.
 */
import { z } from 'zod';

/** What a job is: a run that ends (`job`, the default) or a service that runs until stopped. */
export const JobKindSchema = z
  .enum(['job', 'service'])
  .describe(
    '`service`: it runs until stopped (cancelled), on ports of its own (`ports`), watched by `health`, and is started again whenever it ends by itself; reach it through the SSH gateway (`trainyard service open`). Not with shards or nodes',
  );
export type JobKind = z.infer<typeof JobKindSchema>;

/** The most ports a service may be given. */
export const MAX_SERVICE_PORTS = 8;

/** How many ports a service asks for. */
export const ServicePortCountSchema = z
  .number()
  .int()
  .min(1)
  .max(MAX_SERVICE_PORTS)
  .describe(
    `a service only: how many ports it is given on its worker (1 to ${MAX_SERVICE_PORTS}, default 1), in TRAINYARD_PORTS; the first also in TRAINYARD_PORT and PORT`,
  );

/** A port an attempt was given. */
export const PortSchema = z.number().int().min(1024).max(65535);

/**
 * How a service's worker tells that it is healthy: an HTTP `GET` of `http` on its first port
 * (any status below 400 is healthy), or `command` run beside it (exit 0 is healthy). Checks
 * start once it runs and count only after `graceS` (or after its first healthy answer); after
 * `failures` unhealthy answers in a row it is stopped and started again.
 */
export const HealthCheckSchema = z
  .object({
    http: z
      .string()
      .max(1024)
      .regex(/^\/[\x21-\x7e]*$/, 'a path such as /health (printable, no spaces)')
      .optional(),
    command: z.string().trim().min(1).max(8192).optional(),
    intervalS: z.number().int().min(2).max(3600).default(15),
    timeoutS: z.number().int().min(1).max(600).default(5),
    failures: z.number().int().min(1).max(100).default(3),
    graceS: z.number().int().min(0).max(86_400).default(300),
  })
  .strict()
  .refine((h) => (h.http === undefined) !== (h.command === undefined), {
    message: 'a health check is an `http` path or a `command`, one of the two',
  })
  .describe(
    'a service only: `http` (a path, GET on its first port, healthy below status 400) or `command` (healthy on exit 0), every `intervalS` (15), each within `timeoutS` (5); after `failures` (3) unhealthy answers in a row, counted once `graceS` (300) has passed or it first answered healthy, it is stopped and started again',
  );
export type HealthCheck = z.infer<typeof HealthCheckSchema>;
