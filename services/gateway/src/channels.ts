/**
 * SSH channels of a logged-in connection, turned into `ChannelRequest`s and piped to the
 * `Channel`s the session opens: a session channel (shell, command, sftp) with its terminal,
 * environment, resizes and signals; a `direct-tcpip` channel (`ssh -L`) to the session's own
 * loopback.
 */
import { once } from 'node:events';
import type { Readable, Writable } from 'node:stream';
import type { ServerChannel, Session, TcpipRequestInfo } from 'ssh2';
import {
  type Channel,
  type ChannelExit,
  ChannelRefused,
  type ChannelRequest,
  type ChannelRequestInput,
  ChannelRequestSchema,
  type PtyRequest,
  PtyRequestSchema,
} from '@trainyard/tunnel';

/** What a connection gives its channels. */
export interface ChannelContext {
  /** Opens a channel in the connection's session. */
  open(request: ChannelRequest): Promise<Channel>;
  /** Whether the SSH connection has closed. */
  readonly closed: boolean;
  /** Settles when the SSH connection closes. */
  readonly gone: Promise<void>;
  /** Counts an open channel, and lets the gateway reach it, until the returned release. */
  track(live: LiveChannel): () => void;
}

/** An open channel as the gateway reaches it from outside: to say goodbye, then to end it. */
export interface LiveChannel {
  /** Writes a line to the client's stderr (nothing for a forward). */
  notify(message: string): void;
  close(): void;
}

/** Hosts `ssh -L` may name: the session's own loopback, nothing else. */
const LOOPBACK = new Set(['localhost', '127.0.0.1', '::1']);
const SIGNAL_NAME = /^[A-Z][A-Z0-9]{0,15}$/;
const MAX_ENV = 64;
const MAX_PENDING_SIGNALS = 8;
/** The largest terminal side a channel takes (`PtyRequestSchema`); larger sizes are clamped. */
const MAX_TERMINAL = 10_000;

type Reply = (() => void) | undefined;
const noop = () => {};

/** Resizes and signals that arrive while the channel is still opening wait for it. */
class Controls {
  private channel: Channel | undefined;
  private size: [number, number] | undefined;
  private readonly signals: string[] = [];

  resize(cols: number, rows: number): void {
    if (this.channel) this.channel.resize(cols, rows);
    else this.size = [cols, rows];
  }

  signal(name: string): void {
    if (this.channel) this.channel.signal(name);
    else if (this.signals.length < MAX_PENDING_SIGNALS) this.signals.push(name);
  }

  attach(channel: Channel): void {
    this.channel = channel;
    if (this.size) channel.resize(...this.size);
    for (const name of this.signals.splice(0)) channel.signal(name);
  }
}

/** Serves one `session` channel: collects its terminal and environment, then runs what it asks. */
export function serveSession(session: Session, ctx: ChannelContext): void {
  const env: Record<string, string> = {};
  const controls = new Controls();
  let pty: PtyRequest | undefined;
  let started = false;

  session.on('pty', (accept: Reply, reject: Reply, info) => {
    // A client without a terminal of its own (`ssh -tt` from a pipe) sends a size of zero.
    const parsed = PtyRequestSchema.safeParse({
      term: info.term ?? '',
      cols: Math.min(info.cols || 80, MAX_TERMINAL),
      rows: Math.min(info.rows || 24, MAX_TERMINAL),
    });
    if (started || !parsed.success) return reject?.();
    pty = parsed.data;
    accept?.();
  });
  session.on('env', (accept: Reply, reject: Reply, info) => {
    const valid = ChannelRequestSchema.safeParse({ kind: 'shell', env: { [info.key]: info.val } });
    if (started || !valid.success || Object.keys(env).length >= MAX_ENV) return reject?.();
    env[info.key] = info.val;
    accept?.();
  });
  session.on('window-change', (accept: Reply, reject: Reply, info) => {
    if (!(info.cols > 0 && info.rows > 0)) return reject?.();
    controls.resize(Math.min(info.cols, MAX_TERMINAL), Math.min(info.rows, MAX_TERMINAL));
    accept?.();
  });
  session.on('signal', (accept: Reply, reject: Reply, info) => {
    if (!SIGNAL_NAME.test(info.name)) return reject?.();
    controls.signal(info.name);
    accept?.();
  });

  const start = (
    accept: () => ServerChannel | undefined,
    reject: Reply,
    request: ChannelRequestInput,
  ) => {
    const parsed = ChannelRequestSchema.safeParse(request);
    if (started || !parsed.success) return reject?.();
    started = true;
    // Accepted at once: bytes and end-of-file the client sends meanwhile wait in the stream.
    const stream = accept();
    if (stream) void runSession(stream, parsed.data, ctx, controls);
  };
  session.on('shell', (accept, reject: Reply) =>
    start(accept, reject, { kind: 'shell', pty, env }),
  );
  session.on('exec', (accept, reject: Reply, info) =>
    start(accept, reject, { kind: 'exec', command: info.command, pty, env }),
  );
  session.on('subsystem', (accept, reject: Reply, info) => {
    if (info.name !== 'sftp') return reject?.();
    start(accept, reject, { kind: 'sftp' });
  });
}

async function runSession(
  stream: ServerChannel,
  request: ChannelRequest,
  ctx: ChannelContext,
  controls: Controls,
): Promise<void> {
  stream.on('error', noop);
  stream.stderr.on('error', noop);
  const streamGone = onceClosed(stream, stream.stderr);
  const ended = Promise.race([streamGone.promise, ctx.gone]);
  const newline = 'pty' in request && request.pty ? '\r\n' : '\n';

  let channel: Channel;
  try {
    channel = await ctx.open(request);
  } catch (err) {
    if (streamGone.closed || ctx.closed) return;
    stream.stderr.write(`trainyard: ${refusal(err)}${newline}`);
    stream.exit(255);
    stream.end();
    return;
  }
  if (streamGone.closed || ctx.closed) return channel.close();

  const release = ctx.track({
    notify: (message) => stream.stderr.write(`${message}${newline}`),
    close: () => channel.close(),
  });
  void ended.then(() => channel.close());
  controls.attach(channel);
  try {
    feed(stream, channel.input);
    const copied = Promise.all([copy(channel.output, stream), copy(channel.errors, stream.stderr)]);
    const exit = await Promise.race([channel.exit, ended.then(() => null)]);
    if (!exit) return;
    await Promise.race([copied, ended]);
    // The exit status goes after the last byte of output, not before bytes still queued.
    await Promise.race([Promise.all([flush(stream), flush(stream.stderr)]), ended]);
    if (streamGone.closed || ctx.closed) return;
    sendExit(stream, exit, newline);
    stream.end();
  } finally {
    release();
  }
}

/** Serves one `direct-tcpip` channel (`ssh -L`): only to the session's own loopback. */
export async function serveForward(
  accept: () => ServerChannel | undefined,
  reject: () => void,
  info: TcpipRequestInfo,
  ctx: ChannelContext,
): Promise<void> {
  const parsed = ChannelRequestSchema.safeParse({ kind: 'forward', port: info.destPort });
  if (!LOOPBACK.has(info.destIP) || !parsed.success) return reject();
  let channel: Channel;
  try {
    channel = await ctx.open(parsed.data);
  } catch {
    return reject();
  }
  const stream = ctx.closed ? undefined : accept();
  if (!stream) return channel.close();

  stream.on('error', noop);
  const ended = Promise.race([onceClosed(stream).promise, ctx.gone]);
  const release = ctx.track({ notify: noop, close: () => channel.close() });
  void ended.then(() => channel.close());
  try {
    feed(stream, channel.input);
    channel.output.on('error', noop);
    channel.output.pipe(stream);
    await Promise.race([channel.exit, ended]);
    if (stream.writable) stream.end();
  } finally {
    release();
  }
}

/** The client's bytes to the channel, with backpressure; the client's end-of-file ends it. */
function feed(stream: ServerChannel, input: Writable): void {
  input.on('error', noop);
  stream.pipe(input);
}

/** Pipes `from` into `to` without ending it; settles when `from` is done. */
function copy(from: Readable, to: Writable): Promise<void> {
  from.on('error', noop);
  if (from.readableEnded || from.destroyed) return Promise.resolve();
  const done = Promise.race([once(from, 'end'), once(from, 'close')]).then(noop, noop);
  from.pipe(to, { end: false });
  return done;
}

/** Settles once everything written to `to` so far has gone out. */
function flush(to: Writable): Promise<void> {
  if (!to.writable) return Promise.resolve();
  return new Promise((resolve) => to.write(Buffer.alloc(0), () => resolve()));
}

/** Whether, and when, the client closed this channel: whichever of its streams says so first. */
function onceClosed(...streams: (Readable | Writable)[]): {
  closed: boolean;
  promise: Promise<void>;
} {
  const state = { closed: false, promise: Promise.resolve() };
  state.promise = new Promise((resolve) => {
    const done = () => {
      state.closed = true;
      resolve();
    };
    for (const s of streams) s.once('close', done);
  });
  return state;
}

/** What the user is told when a channel ended without its process's word (`ChannelExit.error`). */
const LOST: Record<string, string> = {
  lost: "trainyard: the session's worker stopped answering; the channel is closed",
  stopped: "trainyard: the session's worker is stopping; the channel is closed",
  disconnected: 'trainyard: the gateway lost its connection to the cluster',
};

function sendExit(stream: ServerChannel, exit: ChannelExit, newline: string): void {
  if (exit.error && exit.code === null && exit.signal === null) {
    stream.stderr.write(
      `${LOST[exit.error] ?? `trainyard: the channel broke (${exit.error})`}${newline}`,
    );
  }
  if (exit.signal) {
    // ssh2 throws for a signal SSH has no name for; the client still learns it failed.
    try {
      stream.exit(exit.signal, false, '');
    } catch {
      stream.exit(255);
    }
  } else if (exit.code !== null) {
    stream.exit(exit.code);
  }
}

function refusal(err: unknown): string {
  if (err instanceof ChannelRefused) return err.message;
  return 'the session could not be reached';
}
