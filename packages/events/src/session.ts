/**
 * Session events.
 *
 * Glossary
 * - session: an interactive shell a user asked for, on a worker's GPUs, reached with `ssh`
 *   through the gateway. Unlike a job it runs no command of its own: it holds its slot, a
 *   working directory (with the code the user sent, unpacked) or a container (of an image built
 *   for it, or of a job's), that the user's SSH channels attach to.
 * - run: one placement of a session on one worker (`runId`). A session whose worker is lost is
 *   placed again as a new run; what the old run held is gone.
 * - channel: one SSH channel (a shell, an exec, sftp, a port forward), carried over NATS
 *   between the gateway and the worker that holds the run.
 */
import { z } from 'zod';
import { FailureSchema, SshLoginSchema } from './common.ts';
import { TEAM_NAME } from './team.ts';
import {
  BaseImageSchema,
  BuiltImageSchema,
  CodeArchiveSchema,
  JOB_ID_PATTERN,
  ResourcesSchema,
} from './job.ts';

export const SESSION_NAME_MAX = 128;

/**
 * How long a session may wait for its first login, be idle, and live, in minutes (fractions
 * allowed: a few seconds is a short-lived session, not an error).
 */
export const SessionTimersSchema = z.object({
  /** Stopped if no one has logged in this long after it started running. */
  connectMin: z.number().min(0.05).max(10_080),
  /** Stopped when no channel has been open this long. */
  idleMin: z.number().min(0.05).max(10_080),
  /** Stopped this long after it started running, whatever happens. */
  maxMin: z.number().min(0.05).max(43_200),
});
export type SessionTimers = z.infer<typeof SessionTimersSchema>;

/** The user's description of a session, as accepted by the API. */
export const SessionSpecSchema = z.object({
  name: z.string().trim().min(1).max(SESSION_NAME_MAX).optional(),
  resources: ResourcesSchema,
  /** The team of the user's to charge its GPUs to; by default, the first team they joined. */
  team: z.string().regex(TEAM_NAME, 'a team name').optional(),
  /** Timers the user asked for; each is capped by the operator's maximum. */
  timers: SessionTimersSchema.partial().default({}),
  /**
   * The base image the session's image is built on, with its code and `requirements.txt`
   * (`python`: Trainyard's default base): the session runs in a container, on a worker of the
   * Docker runtime.
   */
  image: BaseImageSchema.optional(),
  /**
   * A job of the user's whose image the session runs in (its code and requirements, as built):
   * the session runs in a container, on a worker of the Docker runtime.
   */
  fromJob: z.string().regex(JOB_ID_PATTERN, 'a job id such as job_01J...').optional(),
});
export type SessionSpec = z.infer<typeof SessionSpecSchema>;
export type SessionSpecInput = z.input<typeof SessionSpecSchema>;

export const SessionRequested = z.object({
  type: z.literal('SessionRequested'),
  data: z.object({
    owner: z.string().min(1),
    spec: SessionSpecSchema,
    /** The timers in force, decided once at request from the spec, defaults and caps. */
    timers: SessionTimersSchema,
    /** The code the user sent with it, unpacked in the session's home on each run. */
    code: CodeArchiveSchema.optional(),
    /** The image it runs in, decided once at request (a job's, by digest): in a container. */
    image: BuiltImageSchema.optional(),
    /** Its image is to be built first (its spec names a base image): it starts `building`. */
    build: z.boolean().optional(),
    /** The team its GPUs are charged to, decided once at request from its owner's teams. */
    team: z.string().regex(TEAM_NAME).optional(),
  }),
});

/** A builder took the session's build. */
export const SessionBuildStarted = z.object({
  type: z.literal('SessionBuildStarted'),
  data: z.object({ builderId: z.string().min(1) }),
});

/** The session's image is built and pushed: it waits for a place. */
export const SessionBuilt = z.object({
  type: z.literal('SessionBuilt'),
  data: z.object({ image: BuiltImageSchema, durationMs: z.number().nonnegative() }),
});

/** The scheduler placed the session: a new run on a worker's slot. */
export const SessionAssigned = z.object({
  type: z.literal('SessionAssigned'),
  data: z.object({
    runId: z.string().min(1),
    run: z.number().int().min(1),
    workerId: z.string().min(1),
    gpus: z.array(z.number().int().min(0)),
    vramBytes: z.number().int().nonnegative(),
    cpus: z.number().int().min(0),
  }),
});

/** The worker has the run's working directory ready: channels may attach. */
export const SessionStarted = z.object({
  type: z.literal('SessionStarted'),
  data: z.object({ runId: z.string().min(1) }),
});

/** Why a session stops. */
export const SessionStopReason = {
  /** Its owner (or an admin) stopped it. */
  user: 'user',
  /** No one logged in within the connect timer. */
  neverConnected: 'neverConnected',
  /** No channel was open for the idle timer. */
  idle: 'idle',
  /** It reached its hard cap. */
  maxDuration: 'maxDuration',
  /** Its run did not start on its worker in time (an image pull that hangs, a wedged worker). */
  startTimeout: 'startTimeout',
} as const;
export type SessionStopReason = (typeof SessionStopReason)[keyof typeof SessionStopReason];

export const SessionStopRequested = z.object({
  type: z.literal('SessionStopRequested'),
  data: z.object({
    reason: z.enum(['user', 'neverConnected', 'idle', 'maxDuration', 'startTimeout']),
    /** The run the worker must end, if one was placed. */
    runId: z.string().min(1).nullable(),
    workerId: z.string().min(1).nullable(),
  }),
});

/** The session has ended and its slot is free. */
export const SessionStopped = z.object({
  type: z.literal('SessionStopped'),
  data: z.object({ runId: z.string().min(1).nullable() }),
});

/** The run ended without being asked to (its worker failed it): the session failed. */
export const SessionFailed = z.object({
  type: z.literal('SessionFailed'),
  data: z.object({ runId: z.string().min(1).nullable(), failure: FailureSchema }),
});

/**
 * The run's worker was lost: the session waits to be placed again, as a new run. Whatever the
 * old run held (files, processes) is gone, and the user must connect again.
 */
export const SessionRequeued = z.object({
  type: z.literal('SessionRequeued'),
  data: z.object({ runId: z.string().min(1), reason: z.string().min(1).max(512) }),
});

/** A login to the session through the gateway, accepted or refused. */
export const SessionLogin = z.object({
  type: z.literal('SessionLogin'),
  data: SshLoginSchema,
});

/** The session's channels: the first opened (`active`), or the last closed (`idle`). */
export const SessionActivity = z.object({
  type: z.literal('SessionActivity'),
  data: z.object({ runId: z.string().min(1), active: z.boolean() }),
});

export const SessionEventSchema = z.discriminatedUnion('type', [
  SessionRequested,
  SessionBuildStarted,
  SessionBuilt,
  SessionAssigned,
  SessionStarted,
  SessionStopRequested,
  SessionStopped,
  SessionFailed,
  SessionRequeued,
  SessionLogin,
  SessionActivity,
]);
export type SessionEvent = z.infer<typeof SessionEventSchema>;
export type SessionEventType = SessionEvent['type'];

/** The public statuses of a session, in lifecycle order. */
export const SessionStatus = {
  requested: 'requested',
  building: 'building',
  queued: 'queued',
  starting: 'starting',
  running: 'running',
  stopping: 'stopping',
  stopped: 'stopped',
  failed: 'failed',
} as const;
export type SessionStatus = (typeof SessionStatus)[keyof typeof SessionStatus];
