/**
 * SSH channels, as the gateway and a worker see them. The gateway turns each SSH channel into a
 * `ChannelRequest`; the worker opens a `Channel` for it in the session's run (a pty shell, a
 * command, the sftp server, a TCP connection); the tunnel carries the channel's bytes and
 * controls between the two over NATS, with flow control on both directions.
 */
import type { Readable, Writable } from 'node:stream';
import { z } from 'zod';

/** A terminal the client asked for: its type and size. */
export const PtyRequestSchema = z.object({
  term: z
    .string()
    .max(64)
    .regex(/^[A-Za-z0-9._+-]*$/),
  cols: z.number().int().min(1).max(10_000),
  rows: z.number().int().min(1).max(10_000),
});
export type PtyRequest = z.infer<typeof PtyRequestSchema>;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const EnvSchema = z.record(z.string().regex(ENV_NAME), z.string().max(4096)).default({});

/** What an SSH channel asks of the session. */
export const ChannelRequestSchema = z.discriminatedUnion('kind', [
  /** `ssh host CMD`: the command run by the login shell, with a terminal if one was asked for. */
  z.object({
    kind: z.literal('exec'),
    command: z.string().min(1).max(65_536),
    pty: PtyRequestSchema.optional(),
    env: EnvSchema,
  }),
  /** `ssh host`: a login shell, with a terminal if one was asked for. */
  z.object({ kind: z.literal('shell'), pty: PtyRequestSchema.optional(), env: EnvSchema }),
  /** The sftp subsystem (`sftp`, and `scp`, which speaks it). */
  z.object({ kind: z.literal('sftp') }),
  /** `ssh -L`: a TCP connection to a port the session listens on, on its own loopback. */
  z.object({ kind: z.literal('forward'), port: z.number().int().min(1).max(65_535) }),
]);
export type ChannelRequest = z.infer<typeof ChannelRequestSchema>;
export type ChannelRequestInput = z.input<typeof ChannelRequestSchema>;

/**
 * How a channel's process ended: its exit code, or the signal that ended it (`TERM`, `KILL`).
 * `error` says why a channel ended without its process's word: `lost` when the far end fell
 * silent, `stopped` when the worker shut down, or what broke the stream.
 */
export interface ChannelExit {
  code: number | null;
  signal: string | null;
  error?: string;
}

/**
 * One open channel. The same shape on both sides of the tunnel: the worker's `Channel` is the
 * process or socket itself, the gateway's is its far end.
 */
export interface Channel {
  /** Bytes to the process's stdin, or to the socket; `end()` sends end-of-file. */
  readonly input: Writable;
  /** The process's stdout (a pty's whole output), or the socket's bytes; ends at end-of-file. */
  readonly output: Readable;
  /** The process's stderr; ends at once for a pty channel and a forward. */
  readonly errors: Readable;
  /** The terminal's new size (pty channels only; otherwise ignored). */
  resize(cols: number, rows: number): void;
  /** Sends a signal (`INT`, `TERM`, `HUP`, `KILL`…) to the process; ignored by a forward. */
  signal(name: string): void;
  /** Ends the channel now: the process is killed, the socket closed; `exit` settles. */
  close(): void;
  /**
   * Settles once the process has exited and its output and errors have ended, or the channel
   * was closed. Never rejects.
   */
  readonly exit: Promise<ChannelExit>;
}

/** Which session run a channel is for, as the gateway names it to the worker. */
export interface ChannelTarget {
  sessionId: string;
  runId: string;
}

/** The worker's side: opens channels in the runs it holds. */
export interface ChannelHost {
  /** Opens a channel; rejects with a `ChannelRefused` when the run is not here or cannot. */
  open(target: ChannelTarget, request: ChannelRequest): Promise<Channel>;
}

/** A channel could not be opened: `code` is stable (`noSuchRun`, `refused`, `unreachable`…). */
export class ChannelRefused extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ChannelRefused';
  }
}
