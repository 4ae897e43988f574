/**
 * The gateway's side of the tunnel: opens channels on workers and hands each back as a
 * `Channel` whose streams are the far process's. The gateway publishes only under
 * `ty.tun.in.>` and hears each channel on a subject of its own under `ty.tun.out.WORKER`, so
 * no NATS request inbox is involved and a worker can only ever answer for itself.
 */
import { finished } from 'node:stream';
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { Subjects } from '@trainyard/events';
import {
  ChannelRefused,
  ChannelRequestSchema,
  type Channel,
  type ChannelExit,
  type ChannelRequestInput,
  type ChannelTarget,
} from './channel.ts';
import { CreditedReadable, CreditedWritable } from './flow.ts';
import {
  DEFAULT_KEEPALIVE_MS,
  DEFAULT_OPEN_TIMEOUT_MS,
  DEFAULT_WINDOW,
  FrameReader,
  FrameWriter,
  MISSED_KEEPALIVES,
  newChannelId,
  type Frame,
  type OpenMessage,
} from './frames.ts';

export interface TunnelClientOptions {
  /** How long a worker has to answer an open before it counts as unreachable (10 s). */
  openTimeoutMs?: number;
  /** How often each channel pings its worker (10 s); 3 silent intervals end the channel. */
  keepaliveMs?: number;
  /** How many bytes of a channel's stdout, and of its stderr, may wait here unread (4 MiB). */
  window?: number;
}

/** Opens channels on workers, over NATS. */
export class TunnelClient {
  private readonly openTimeoutMs: number;
  private readonly keepaliveMs: number;
  private readonly window: number;

  constructor(
    private readonly nc: NatsConnection,
    opts: TunnelClientOptions = {},
  ) {
    this.openTimeoutMs = opts.openTimeoutMs ?? DEFAULT_OPEN_TIMEOUT_MS;
    this.keepaliveMs = opts.keepaliveMs ?? DEFAULT_KEEPALIVE_MS;
    this.window = opts.window ?? DEFAULT_WINDOW;
  }

  /**
   * Opens a channel in `target`'s run on `workerId`. Rejects with a `ChannelRefused`: the
   * worker's own code when it refuses, `unreachable` when it does not answer in time,
   * `badRequest` when the request could never be sent.
   */
  open(workerId: string, target: ChannelTarget, request: ChannelRequestInput): Promise<Channel> {
    const channelId = newChannelId();
    let open: OpenMessage;
    let inSubject: string;
    let outSubject: string;
    try {
      inSubject = `${Subjects.tunnelIn(workerId)}.${channelId}`;
      outSubject = `${Subjects.tunnelOut(workerId)}.${channelId}`;
      open = {
        channelId,
        target: { sessionId: target.sessionId, runId: target.runId },
        request: ChannelRequestSchema.parse(request),
        window: this.window,
        keepaliveMs: this.keepaliveMs,
      };
    } catch (err) {
      return Promise.reject(new ChannelRefused('badRequest', (err as Error).message));
    }
    const channel = new ClientChannel(
      this.nc,
      inSubject,
      outSubject,
      this.window,
      this.keepaliveMs,
    );
    try {
      this.nc.publish(`${Subjects.tunnelIn(workerId)}.open`, JSON.stringify(open));
    } catch (err) {
      channel.refuse(new ChannelRefused('unreachable', (err as Error).message));
    }
    const timer = setTimeout(
      () =>
        channel.refuse(
          new ChannelRefused(
            'unreachable',
            `worker ${workerId} did not answer within ${this.openTimeoutMs} ms`,
          ),
        ),
      this.openTimeoutMs,
    );
    return channel.opened.finally(() => clearTimeout(timer));
  }
}

/** The gateway's end of one channel. */
class ClientChannel implements Channel {
  readonly input: CreditedWritable;
  readonly output: CreditedReadable;
  readonly errors: CreditedReadable;
  readonly exit: Promise<ChannelExit>;
  /** Settles with this channel once the worker says `opened`, or rejects when it will not. */
  readonly opened: Promise<Channel>;

  private state: 'opening' | 'open' | 'done' = 'opening';
  private readonly writer: FrameWriter;
  private readonly reader = new FrameReader();
  private readonly sub: Subscription;
  private settleExit!: (exit: ChannelExit) => void;
  private settleOpen!: { resolve: (channel: Channel) => void; reject: (err: Error) => void };
  private lastHeard = Date.now();
  private keepalive: NodeJS.Timeout | null = null;

  constructor(
    nc: NatsConnection,
    inSubject: string,
    outSubject: string,
    window: number,
    private readonly keepaliveMs: number,
  ) {
    this.exit = new Promise((resolve) => (this.settleExit = resolve));
    this.opened = new Promise((resolve, reject) => (this.settleOpen = { resolve, reject }));
    this.writer = new FrameWriter(nc, inSubject, () => this.end({ error: 'disconnected' }, false));
    this.input = new CreditedWritable(
      (bytes) => this.writer.data('data', bytes),
      () => this.writer.send('eof', { stream: 'stdin' }),
      0,
    );
    this.output = new CreditedReadable(window, (bytes) =>
      this.writer.send('credit', { stream: 'stdout', bytes }),
    );
    this.errors = new CreditedReadable(window, (bytes) =>
      this.writer.send('credit', { stream: 'stderr', bytes }),
    );
    this.sub = nc.subscribe(outSubject, {
      callback: (err, msg) => {
        if (err) this.end({ error: 'disconnected' }, false);
        else this.receive(msg);
      },
    });
    this.sub.closed.then(
      () => this.end({ error: 'disconnected' }, false),
      () => this.end({ error: 'disconnected' }, false),
    );
  }

  resize(cols: number, rows: number): void {
    if (this.state === 'open') this.writer.send('resize', { cols, rows });
  }

  signal(name: string): void {
    if (this.state === 'open' && /^[A-Z0-9]{1,16}$/.test(name))
      this.writer.send('signal', { name });
  }

  close(): void {
    this.end({}, true);
  }

  /** The open failed: nothing was handed out, so only the subscription needs undoing. */
  refuse(err: ChannelRefused): void {
    if (this.state !== 'opening') return;
    this.state = 'done';
    this.sub.unsubscribe();
    this.input.destroy();
    this.output.destroy();
    this.errors.destroy();
    this.settleExit({ code: null, signal: null, error: err.code });
    this.settleOpen.reject(err);
  }

  private receive(msg: Msg): void {
    if (this.state === 'done') return;
    const frame = this.reader.read(msg);
    if (frame.kind === 'broken') return this.fail(frame.reason);
    this.lastHeard = Date.now();
    if (this.state === 'opening') return this.receiveFirst(frame);
    switch (frame.kind) {
      case 'data':
        if (!this.output.deliver(frame.bytes)) this.fail('stdout overran its window');
        return;
      case 'stderr':
        if (!this.errors.deliver(frame.bytes)) this.fail('stderr overran its window');
        return;
      case 'eof':
        return (frame.stream === 'stderr' ? this.errors : this.output).finish();
      case 'credit':
        if (frame.stream === 'stdin') this.input.grant(frame.bytes);
        return;
      case 'exit':
        return this.exited({ code: frame.code, signal: frame.signal });
      case 'close':
        return this.end({ error: frame.error ?? 'closed' }, false);
      case 'pong':
        return;
      default:
        return this.fail(`unexpected ${frame.kind} frame`);
    }
  }

  private receiveFirst(frame: Frame): void {
    if (frame.kind === 'refused') {
      this.refuse(new ChannelRefused(frame.code, frame.message));
    } else if (frame.kind === 'opened') {
      this.state = 'open';
      this.input.grant(frame.window);
      this.keepalive = setInterval(() => this.tick(), this.keepaliveMs).unref();
      this.settleOpen.resolve(this);
    } else {
      this.refuse(new ChannelRefused('protocol', `worker answered ${frame.kind}`));
    }
  }

  private tick(): void {
    if (Date.now() - this.lastHeard >= MISSED_KEEPALIVES * this.keepaliveMs) {
      this.end({ error: 'lost' }, true);
    } else {
      this.writer.send('ping', {});
    }
  }

  private fail(error: string): void {
    if (this.state === 'opening') this.refuse(new ChannelRefused('protocol', error));
    else this.end({ error }, true);
  }

  /** The process exited: settle once the reader has had all of its output and errors. */
  private exited(exit: ChannelExit): void {
    this.stop();
    this.output.finish();
    this.errors.finish();
    const drained = (stream: CreditedReadable) =>
      new Promise<void>((resolve) => finished(stream, () => resolve()));
    void Promise.all([drained(this.output), drained(this.errors)]).then(() =>
      this.settleExit(exit),
    );
  }

  /** Ends the channel at once, telling the worker when `notify` and it may still hear. */
  private end(why: { error?: string }, notify: boolean): void {
    if (this.state === 'opening') {
      this.refuse(new ChannelRefused('unreachable', why.error ?? 'closed'));
      return;
    }
    if (this.state === 'done') return;
    if (notify) this.writer.send('close', why.error === undefined ? {} : { error: why.error });
    this.stop();
    this.output.finish();
    this.errors.finish();
    this.settleExit({ code: null, signal: null, ...why });
  }

  private stop(): void {
    this.state = 'done';
    if (this.keepalive) clearInterval(this.keepalive);
    this.sub.unsubscribe();
    this.input.destroy();
  }
}
