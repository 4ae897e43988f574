/**
 * The tunnel's wire format. The gateway opens a channel with one JSON message on
 * `ty.tun.in.WORKER.open`; after that each side sends frames on the channel's own subject
 * (`ty.tun.in.WORKER.CHANNEL` towards the worker, `ty.tun.out.WORKER.CHANNEL` back). A frame's
 * kind and its place in its direction's sequence ride in NATS headers; its payload is the bytes
 * themselves (data) or a small JSON body (control). Core NATS drops messages for a slow
 * consumer without a word, so every frame is numbered and a gap ends the channel.
 */
import { randomBytes } from 'node:crypto';
import { Empty, headers, type Msg, type NatsConnection } from '@nats-io/nats-core';
import { z } from 'zod';
import { assertSubjectToken } from '@trainyard/events';
import { ChannelRequestSchema } from './channel.ts';

/** The most bytes one data frame carries. */
export const FRAME_BYTES = 64 * 1024;
/** How many bytes of a stream may be unread at its far end, unless configured. */
export const DEFAULT_WINDOW = 4 * 1024 * 1024;
/** How often the gateway pings each channel, unless configured; 3 silent intervals end it. */
export const DEFAULT_KEEPALIVE_MS = 10_000;
/** How long the gateway waits for a worker to answer an open, unless configured. */
export const DEFAULT_OPEN_TIMEOUT_MS = 10_000;
/** Channels missing this many keepalive intervals in a row are taken for lost. */
export const MISSED_KEEPALIVES = 3;

const KIND_HEADER = 'Ty-Kind';
const SEQ_HEADER = 'Ty-Seq';

const safeToken = z.string().refine((token) => {
  try {
    assertSubjectToken(token, 'id');
    return true;
  } catch {
    return false;
  }
}, 'not a valid id');

/** A channel id: one subject token, and never the `open` that shares its subject space. */
export const ChannelIdSchema = safeToken.refine((id) => id !== 'open', 'reserved id');

const windowSize = z
  .number()
  .int()
  .min(1024)
  .max(2 ** 30);

/** What the gateway sends on `ty.tun.in.WORKER.open`. */
export const OpenMessageSchema = z.object({
  channelId: ChannelIdSchema,
  target: z.object({ sessionId: safeToken, runId: safeToken }),
  request: ChannelRequestSchema,
  /** How many bytes of stdout, and of stderr, the gateway takes unread. */
  window: windowSize.optional(),
  /** How often the gateway will ping; the worker gives up after 3 silent intervals. */
  keepaliveMs: z.number().int().min(10).max(600_000).optional(),
});
export type OpenMessage = z.input<typeof OpenMessageSchema>;

/** The three byte streams of a channel; stdout and stderr flow to the gateway, stdin back. */
export const StreamNameSchema = z.enum(['stdout', 'stderr', 'stdin']);
export type StreamName = z.infer<typeof StreamNameSchema>;

/** The bodies of the control frames, by kind. */
const Control = {
  /** The worker opened the channel; `window` is how much stdin it takes unread. */
  opened: z.object({ window: windowSize }),
  refused: z.object({ code: z.string().max(64), message: z.string().max(4096) }),
  eof: z.object({ stream: StreamNameSchema }),
  exit: z.object({ code: z.number().int().nullable(), signal: z.string().max(32).nullable() }),
  resize: z.object({
    cols: z.number().int().min(1).max(10_000),
    rows: z.number().int().min(1).max(10_000),
  }),
  signal: z.object({ name: z.string().regex(/^[A-Z0-9]{1,16}$/) }),
  /** The sender of `stream` may send `bytes` more. */
  credit: z.object({
    stream: StreamNameSchema,
    bytes: z
      .number()
      .int()
      .min(1)
      .max(2 ** 31),
  }),
  close: z.object({ error: z.string().max(256).optional() }),
  ping: z.object({}),
  pong: z.object({}),
};
export type ControlKind = keyof typeof Control;
export type ControlBody<K extends ControlKind> = z.infer<(typeof Control)[K]>;
/** `data` is stdout towards the gateway and stdin towards the worker. */
export type DataKind = 'data' | 'stderr';

export type Frame =
  | { kind: DataKind; bytes: Buffer }
  | { [K in ControlKind]: { kind: K } & ControlBody<K> }[ControlKind];

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Frames one direction of a channel, numbering them. */
export class FrameWriter {
  private seq = 0;

  /** `onFail` hears, once and outside the caller's stack, that the connection took no more. */
  constructor(
    private readonly nc: NatsConnection,
    readonly subject: string,
    private readonly onFail: (error: Error) => void,
  ) {}

  /**
   * Sends bytes as a data frame. They are copied: the connection holds what it is given until
   * it next flushes, and the writer may reuse its buffer as soon as its write is done.
   */
  data(kind: DataKind, bytes: Uint8Array): void {
    this.publish(kind, bytes.slice());
  }

  send<K extends ControlKind>(kind: K, body: ControlBody<K>): void {
    this.publish(
      kind,
      kind === 'ping' || kind === 'pong' ? Empty : encoder.encode(JSON.stringify(body)),
    );
  }

  private publish(kind: string, payload: Uint8Array): void {
    const h = headers();
    h.set(KIND_HEADER, kind);
    h.set(SEQ_HEADER, String(this.seq++));
    try {
      this.nc.publish(this.subject, payload, { headers: h });
    } catch (err) {
      queueMicrotask(() => this.onFail(err as Error));
    }
  }
}

/** Reads one direction of a channel: a frame, or (`broken`) why it can no longer be trusted. */
export class FrameReader {
  private expected = 0;

  read(msg: Msg): Frame | { kind: 'broken'; reason: string } {
    const kind = msg.headers?.get(KIND_HEADER) ?? '';
    const seq = Number(msg.headers?.get(SEQ_HEADER) ?? NaN);
    if (seq !== this.expected) return { kind: 'broken', reason: `frame ${this.expected} lost` };
    this.expected++;
    if (kind === 'data' || kind === 'stderr') {
      // A buffer of its own (not a slice of Node's pool): a slow reader may hold it a while.
      const bytes = Buffer.allocUnsafeSlow(msg.data.length);
      bytes.set(msg.data);
      return { kind, bytes };
    }
    if (!Object.hasOwn(Control, kind))
      return { kind: 'broken', reason: `unknown frame ${JSON.stringify(kind)}` };
    let json: unknown;
    try {
      json = msg.data.length === 0 ? {} : JSON.parse(decoder.decode(msg.data));
    } catch {
      return { kind: 'broken', reason: `malformed ${kind} frame` };
    }
    const body = Control[kind as ControlKind].safeParse(json);
    if (!body.success) return { kind: 'broken', reason: `malformed ${kind} frame` };
    return { kind, ...body.data } as Frame;
  }
}

/** A random channel id: 128 bits, base64url, so one subject token no one can guess. */
export function newChannelId(): string {
  return randomBytes(16).toString('base64url');
}
