/**
 * The worker's side of the tunnel: takes open requests on `ty.tun.in.WORKER.open`, opens each
 * channel through the worker's `ChannelHost`, and carries the channel's streams and controls
 * to and from the gateway. Everything it sends goes under `ty.tun.out.WORKER.`, the only
 * subjects a worker may publish channel traffic on.
 */
import { finished, type Readable } from 'node:stream';
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { z } from 'zod';
import { Subjects } from '@trainyard/events';
import { ChannelRefused, type Channel, type ChannelHost, type ChannelTarget } from './channel.ts';
import { CreditedSink, CreditedWritable } from './flow.ts';
import {
  ChannelIdSchema,
  DEFAULT_KEEPALIVE_MS,
  DEFAULT_WINDOW,
  FrameReader,
  FrameWriter,
  MISSED_KEEPALIVES,
  OpenMessageSchema,
} from './frames.ts';

export interface TunnelServerOptions {
  /** How many bytes of a channel's stdin may wait here unwritten (4 MiB). */
  window?: number;
  /** The keepalive interval assumed when an open request names none (10 s). */
  keepaliveMs?: number;
  /**
   * Hears a target's count of open channels when it becomes 1 (the first opened) and when it
   * falls to 0 (the last closed), so the worker can tell when a session is in use.
   */
  onActivity?: (target: ChannelTarget, openCount: number) => void;
  /** Hears what was dropped or went wrong, for the worker's log. */
  onWarning?: (message: string) => void;
}

/** A worker's tunnel endpoint, as `serveTunnel` returns it. */
export interface TunnelServer {
  /** How many channels are open: for `target`, or in all. */
  openChannels(target?: ChannelTarget): number;
  /** Closes every channel (their processes are killed) and takes no more. */
  stop(): Promise<void>;
}

/** Serves the gateway's channels for `workerId`, opening each through `host`. */
export function serveTunnel(
  nc: NatsConnection,
  workerId: string,
  host: ChannelHost,
  opts: TunnelServerOptions = {},
): TunnelServer {
  return new WorkerTunnel(nc, workerId, host, opts);
}

const targetKey = (target: ChannelTarget) => `${target.sessionId}.${target.runId}`;

class WorkerTunnel implements TunnelServer {
  private readonly prefix: string;
  private readonly outPrefix: string;
  private readonly sub: Subscription;
  private readonly channels = new Map<string, WorkerChannel>();
  private readonly opening = new Set<string>();
  private readonly pending = new Set<Promise<void>>();
  private readonly counts = new Map<string, number>();
  private stopped = false;

  constructor(
    private readonly nc: NatsConnection,
    workerId: string,
    private readonly host: ChannelHost,
    private readonly opts: TunnelServerOptions,
  ) {
    this.prefix = `${Subjects.tunnelIn(workerId)}.`;
    this.outPrefix = `${Subjects.tunnelOut(workerId)}.`;
    this.sub = nc.subscribe(`${this.prefix}>`, {
      callback: (err, msg) => {
        if (err) return this.warn(`tunnel subscription failed: ${err.message}`);
        const name = msg.subject.slice(this.prefix.length);
        if (name === 'open') this.open(msg);
        else this.channels.get(name)?.receive(msg);
      },
    });
  }

  openChannels(target?: ChannelTarget): number {
    return target ? (this.counts.get(targetKey(target)) ?? 0) : this.channels.size;
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.sub.unsubscribe();
    for (const channel of [...this.channels.values()]) channel.end('stopped');
    await Promise.all(this.pending);
    await this.nc.flush().catch(() => undefined);
  }

  private open(msg: Msg): void {
    let raw: unknown;
    try {
      raw = msg.json();
    } catch {
      return this.warn('dropped an open request that is not JSON');
    }
    const parsed = OpenMessageSchema.safeParse(raw);
    if (!parsed.success) {
      const id = ChannelIdSchema.safeParse((raw as { channelId?: unknown } | null)?.channelId);
      if (!id.success || this.busy(id.data)) return this.warn('dropped a malformed open request');
      return this.refuse(id.data, 'badRequest', z.prettifyError(parsed.error));
    }
    const { channelId, target, request, window, keepaliveMs } = parsed.data;
    if (this.busy(channelId)) return this.warn(`dropped a second open of channel ${channelId}`);
    this.opening.add(channelId);
    const opened = Promise.resolve()
      .then(() => this.host.open(target, request))
      .then(
        (channel) => {
          if (this.stopped) {
            closeQuietly(channel);
            return this.refuse(channelId, 'unavailable', 'the worker is stopping');
          }
          this.start(channelId, target, channel, {
            sendWindow: window ?? DEFAULT_WINDOW,
            receiveWindow: this.opts.window ?? DEFAULT_WINDOW,
            keepaliveMs: keepaliveMs ?? this.opts.keepaliveMs ?? DEFAULT_KEEPALIVE_MS,
          });
        },
        (err: unknown) => {
          const refusal =
            err instanceof ChannelRefused
              ? err
              : new ChannelRefused('failed', err instanceof Error ? err.message : String(err));
          this.refuse(channelId, refusal.code, refusal.message);
        },
      )
      .finally(() => {
        this.opening.delete(channelId);
        this.pending.delete(opened);
      });
    this.pending.add(opened);
  }

  private start(id: string, target: ChannelTarget, channel: Channel, limits: Limits): void {
    const key = targetKey(target);
    const done = () => {
      this.channels.delete(id);
      const count = (this.counts.get(key) ?? 1) - 1;
      if (count > 0) this.counts.set(key, count);
      else this.counts.delete(key);
      if (count === 0) this.activity(target, 0);
    };
    const writer = new FrameWriter(this.nc, this.outPrefix + id, () => worker.end());
    const worker = new WorkerChannel(writer, channel, limits, done);
    this.channels.set(id, worker);
    const count = (this.counts.get(key) ?? 0) + 1;
    this.counts.set(key, count);
    if (count === 1) this.activity(target, 1);
    worker.start();
  }

  private refuse(channelId: string, code: string, message: string): void {
    const writer = new FrameWriter(this.nc, this.outPrefix + channelId, () => undefined);
    writer.send('refused', { code: code.slice(0, 64), message: message.slice(0, 4096) });
  }

  private busy(channelId: string): boolean {
    return this.channels.has(channelId) || this.opening.has(channelId);
  }

  private activity(target: ChannelTarget, count: number): void {
    try {
      this.opts.onActivity?.(target, count);
    } catch (err) {
      this.warn(`onActivity failed: ${(err as Error).message}`);
    }
  }

  private warn(message: string): void {
    this.opts.onWarning?.(message);
  }
}

interface Limits {
  /** How much stdout, and stderr, the gateway takes unread. */
  sendWindow: number;
  /** How much stdin this side takes unwritten. */
  receiveWindow: number;
  keepaliveMs: number;
}

/** One open channel, between the host's process and the gateway. */
class WorkerChannel {
  private readonly reader = new FrameReader();
  private readonly stdout: CreditedWritable;
  private readonly stderr: CreditedWritable;
  private readonly stdin: CreditedSink;
  private lastHeard = Date.now();
  private watchdog: NodeJS.Timeout | null = null;
  private done = false;

  constructor(
    private readonly writer: FrameWriter,
    private readonly host: Channel,
    private readonly limits: Limits,
    private readonly onDone: () => void,
  ) {
    const eof = (stream: 'stdout' | 'stderr') => () => writer.send('eof', { stream });
    // A high-water mark of 0 keeps the host's stream paused whenever a chunk waits for credit.
    this.stdout = new CreditedWritable(
      (bytes) => writer.data('data', bytes),
      eof('stdout'),
      limits.sendWindow,
      0,
    );
    this.stderr = new CreditedWritable(
      (bytes) => writer.data('stderr', bytes),
      eof('stderr'),
      limits.sendWindow,
      0,
    );
    this.stdin = new CreditedSink(host.input, limits.receiveWindow, (bytes) =>
      writer.send('credit', { stream: 'stdin', bytes }),
    );
  }

  /** Says `opened`, then carries the streams until the process exits or the channel ends. */
  start(): void {
    this.writer.send('opened', { window: this.stdin.window });
    // A process gone before reading its stdin fails the write (EPIPE): its exit says the rest.
    this.host.input.on('error', () => undefined);
    // A stream that broke, or was destroyed as its channel was closed here, ends the gateway's
    // copy, so that the exit still follows.
    const endOnClose = (from: Readable, to: CreditedWritable) => {
      const end = () => {
        if (!to.writableEnded && !to.destroyed) to.end();
      };
      from.on('error', end);
      from.once('close', end);
    };
    endOnClose(this.host.output, this.stdout);
    endOnClose(this.host.errors, this.stderr);
    this.host.output.pipe(this.stdout);
    this.host.errors.pipe(this.stderr);
    const silence = MISSED_KEEPALIVES * this.limits.keepaliveMs;
    this.watchdog = setInterval(() => {
      if (Date.now() - this.lastHeard >= silence) this.end('lost');
    }, this.limits.keepaliveMs).unref();
    const sent = (stream: CreditedWritable) =>
      new Promise<void>((resolve) => finished(stream, () => resolve()));
    void Promise.all([this.host.exit, sent(this.stdout), sent(this.stderr)]).then(([exit]) => {
      if (this.done) return;
      this.writer.send('exit', { code: exit.code, signal: exit.signal });
      this.finish();
    });
  }

  receive(msg: Msg): void {
    if (this.done) return;
    const frame = this.reader.read(msg);
    if (frame.kind === 'broken') return this.end(frame.reason);
    this.lastHeard = Date.now();
    switch (frame.kind) {
      case 'data':
        if (!this.stdin.deliver(frame.bytes)) this.end('stdin overran its window');
        return;
      case 'eof':
        if (frame.stream === 'stdin') this.stdin.finish();
        return;
      case 'credit':
        if (frame.stream === 'stdout') this.stdout.grant(frame.bytes);
        if (frame.stream === 'stderr') this.stderr.grant(frame.bytes);
        return;
      case 'resize':
        return guard(() => this.host.resize(frame.cols, frame.rows));
      case 'signal':
        return guard(() => this.host.signal(frame.name));
      case 'ping':
        return this.writer.send('pong', {});
      case 'close':
        return this.end(undefined, false);
      default:
        return this.end(`unexpected ${frame.kind} frame`);
    }
  }

  /** Ends the channel now and kills its process; tells the gateway why when `notify`. */
  end(error?: string, notify = true): void {
    if (this.done) return;
    if (notify) this.writer.send('close', error === undefined ? {} : { error });
    this.finish();
    closeQuietly(this.host);
  }

  private finish(): void {
    this.done = true;
    if (this.watchdog) clearInterval(this.watchdog);
    this.host.output.unpipe(this.stdout);
    this.host.errors.unpipe(this.stderr);
    this.stdout.destroy();
    this.stderr.destroy();
    // Whatever the process still writes is read and dropped, so nothing waits on a full pipe.
    this.host.output.resume();
    this.host.errors.resume();
    this.onDone();
  }
}

function guard(action: () => void): void {
  try {
    action();
  } catch {
    // A control the host cannot apply (a resize without a terminal) changes nothing.
  }
}

function closeQuietly(channel: Channel): void {
  guard(() => channel.close());
}
