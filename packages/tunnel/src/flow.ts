/**
 * Flow control, end to end: each stream's receiver lets its sender have a window of bytes, and
 * grants more only as its own reader takes them. So a reader that stops, at either end, stops
 * the sender after one window, and the bytes it has not read wait in the process that made
 * them (its pipe fills, it blocks) instead of piling up in the gateway or the worker.
 */
import { Readable, Writable } from 'node:stream';
import { FRAME_BYTES } from './frames.ts';

/**
 * Sends a stream's bytes as frames of at most `FRAME_BYTES`, never past the credit granted.
 * A write's callback waits until all its bytes have gone, so a writer that honours
 * backpressure (`pipe`, `pipeline`, awaiting `drain`) holds no more than one chunk here.
 */
export class CreditedWritable extends Writable {
  private credit: number;
  private pending: { chunk: Buffer; offset: number; done: (error?: Error | null) => void } | null =
    null;

  constructor(
    private readonly sendData: (bytes: Buffer) => void,
    private readonly sendEof: () => void,
    window: number,
    highWaterMark?: number,
  ) {
    super(highWaterMark === undefined ? {} : { highWaterMark });
    this.credit = window;
  }

  /** The far end took `bytes` more of this stream. */
  grant(bytes: number): void {
    this.credit += bytes;
    this.pump();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void) {
    this.pending = { chunk, offset: 0, done };
    this.pump();
  }

  override _final(done: (error?: Error | null) => void): void {
    this.sendEof();
    done();
  }

  override _destroy(error: Error | null, done: (error?: Error | null) => void): void {
    const pending = this.pending;
    this.pending = null;
    pending?.done(error ?? new Error('channel closed'));
    done(error);
  }

  private pump(): void {
    const pending = this.pending;
    if (!pending) return;
    while (pending.offset < pending.chunk.length && this.credit > 0 && !this.destroyed) {
      const size = Math.min(FRAME_BYTES, this.credit, pending.chunk.length - pending.offset);
      this.credit -= size;
      this.sendData(pending.chunk.subarray(pending.offset, (pending.offset += size)));
    }
    if (this.pending === pending && pending.offset === pending.chunk.length) {
      this.pending = null;
      pending.done();
    }
  }
}

/**
 * A receiver's side of one stream's window: how much its sender may still send, and how much
 * its reader has taken that the sender has not yet been told of. Grants go out in batches of a
 * quarter window, so a busy stream costs one credit frame per quarter window, not per frame.
 */
class ReceiveWindow {
  private room: number;
  private owed = 0;
  private readonly batch: number;

  constructor(
    private readonly window: number,
    private readonly grant: (bytes: number) => void,
  ) {
    this.room = window;
    this.batch = Math.max(1, Math.floor(window / 4));
  }

  /** Counts bytes in; false when the sender overran its window. */
  arrived(bytes: number): boolean {
    this.room -= bytes;
    return this.room >= 0;
  }

  /** The reader took `bytes`; the sender hears of it once a batch has gathered. */
  taken(bytes: number): void {
    this.owed += bytes;
    if (this.owed < this.batch) return;
    const bytesOwed = this.owed;
    this.owed = 0;
    this.room += bytesOwed;
    this.grant(bytesOwed);
  }

  get size(): number {
    return this.window;
  }
}

/**
 * A stream's arriving bytes as a Readable. Bytes count as taken when `push` takes them without
 * asking to wait, or, once it has asked, when the reader next calls for more (`_read`); so
 * what sits here unread is at most one window and a high-water mark.
 */
export class CreditedReadable extends Readable {
  private readonly flow: ReceiveWindow;
  private held = 0;
  private waiting = false;
  private ended = false;

  constructor(window: number, grant: (bytes: number) => void) {
    super({ highWaterMark: Math.min(FRAME_BYTES, Math.floor(window / 4)) });
    this.flow = new ReceiveWindow(window, grant);
  }

  /** Takes a frame's bytes; false when the sender overran its window. */
  deliver(bytes: Buffer): boolean {
    if (!this.flow.arrived(bytes.length)) return false;
    if (this.ended || this.destroyed) {
      this.flow.taken(bytes.length);
    } else if (this.waiting) {
      this.held += bytes.length;
      this.push(bytes);
    } else if (this.push(bytes)) {
      this.flow.taken(bytes.length);
    } else {
      this.waiting = true;
      this.held += bytes.length;
    }
    return true;
  }

  /** End-of-file: the reader gets what came, then the end. */
  finish(): void {
    if (this.ended) return;
    this.ended = true;
    if (!this.destroyed) this.push(null);
  }

  override _read(): void {
    if (!this.waiting) return;
    this.waiting = false;
    const held = this.held;
    this.held = 0;
    this.flow.taken(held);
  }
}

/**
 * Writes a stream's arriving bytes into a Writable (a process's stdin), granting more as each
 * write completes, so what the Writable buffers is at most one window.
 */
export class CreditedSink {
  private readonly flow: ReceiveWindow;
  private ended = false;

  constructor(
    private readonly target: Writable,
    window: number,
    grant: (bytes: number) => void,
  ) {
    this.flow = new ReceiveWindow(window, grant);
  }

  get window(): number {
    return this.flow.size;
  }

  /** Takes a frame's bytes; false when the sender overran its window. */
  deliver(bytes: Buffer): boolean {
    if (!this.flow.arrived(bytes.length)) return false;
    if (this.ended || this.target.destroyed || this.target.writableEnded) {
      this.flow.taken(bytes.length);
    } else {
      this.target.write(bytes, () => this.flow.taken(bytes.length));
    }
    return true;
  }

  /** End-of-file: the target ends once what came is written. */
  finish(): void {
    if (this.ended) return;
    this.ended = true;
    if (!this.target.destroyed && !this.target.writableEnded) this.target.end();
  }
}
