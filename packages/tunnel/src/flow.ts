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

/** Frames smaller than this that wait for a reader are gathered into larger chunks. */
const SMALL_FRAME = 4 * 1024;
/** The most small frames gathered into one chunk. */
const GATHER_FRAMES = 4096;
/** The high-water mark of the buffers that hold frames one by one, before they are gathered. */
const UNGATHERED_BYTES = 16 * 1024;
/** How many writes a `CreditedSink` lets wait in its Writable at once. */
const MAX_WRITES = 64;

/**
 * A small frame's bytes as a buffer of their own. A small Buffer is often a slice of Node's
 * shared 8 KiB pool, and a slice held keeps the whole block alive: a window of one-byte frames
 * held as slices could pin thousands of blocks.
 */
function own(bytes: Buffer): Buffer {
  if (bytes.length >= SMALL_FRAME || bytes.buffer.byteLength === bytes.length) return bytes;
  const copy = Buffer.allocUnsafeSlow(bytes.length);
  bytes.copy(copy);
  return copy;
}

/**
 * Bytes that wait for a reader, in order. A frame's bytes are held as they came, unless the
 * frame is small: runs of small frames are copied together into one chunk, so what waits costs
 * about its bytes, however finely its sender cut it (a window of one-byte frames would
 * otherwise hold millions of buffers).
 */
class Backlog {
  private readonly chunks: Buffer[] = [];
  private small: Buffer[] = [];
  private smallBytes = 0;

  get empty(): boolean {
    return this.chunks.length === 0 && this.small.length === 0;
  }

  add(bytes: Buffer): void {
    if (bytes.length === 0) return;
    if (bytes.length >= SMALL_FRAME) {
      this.gather();
      this.chunks.push(bytes);
      return;
    }
    this.small.push(bytes);
    this.smallBytes += bytes.length;
    if (this.smallBytes >= SMALL_FRAME || this.small.length >= GATHER_FRAMES) this.gather();
  }

  /** The oldest chunk, or undefined when nothing waits. */
  shift(): Buffer | undefined {
    if (this.chunks.length === 0) this.gather();
    return this.chunks.shift();
  }

  /**
   * Copies the small frames into a chunk. The chunk is a buffer of its own, not a slice of
   * Node's shared pool (as `Buffer.concat` would make it), which it would keep alive whole.
   */
  private gather(): void {
    if (this.small.length === 0) return;
    let chunk = this.small[0]!;
    if (this.small.length > 1) {
      chunk = Buffer.allocUnsafeSlow(this.smallBytes);
      let at = 0;
      for (const piece of this.small) at += piece.copy(chunk, at);
    }
    this.chunks.push(chunk);
    this.small = [];
    this.smallBytes = 0;
  }
}

/**
 * A stream's arriving bytes as a Readable. Bytes count as taken when `push` takes them without
 * asking to wait, or, once it has asked, when the reader next calls for more (`_read`). Bytes
 * that come while it waits are kept in a backlog, and pushed as the reader calls for more; so
 * what sits here unread is at most one window and a high-water mark, in few chunks.
 */
export class CreditedReadable extends Readable {
  private readonly flow: ReceiveWindow;
  private readonly backlog = new Backlog();
  /** Bytes pushed after `push` asked to wait: taken once the reader calls for more. */
  private held = 0;
  private waiting = false;
  private ended = false;

  constructor(window: number, grant: (bytes: number) => void) {
    super({ highWaterMark: Math.min(UNGATHERED_BYTES, Math.floor(window / 4)) });
    this.flow = new ReceiveWindow(window, grant);
  }

  /** Takes a frame's bytes; false when the sender overran its window. */
  deliver(bytes: Buffer): boolean {
    if (!this.flow.arrived(bytes.length)) return false;
    if (bytes.length === 0) return true;
    if (this.ended || this.destroyed) {
      this.flow.taken(bytes.length);
    } else if (this.waiting || !this.backlog.empty) {
      // Behind what waits, even when it arrives while `_read` hands the backlog on.
      this.backlog.add(own(bytes));
    } else {
      this.offer(own(bytes));
    }
    return true;
  }

  /** End-of-file: the reader gets what came, then the end. */
  finish(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.destroyed) return;
    for (let chunk = this.backlog.shift(); chunk; chunk = this.backlog.shift()) this.push(chunk);
    this.push(null);
  }

  override _read(): void {
    if (!this.waiting) return;
    this.waiting = false;
    const held = this.held;
    this.held = 0;
    this.flow.taken(held);
    while (!this.waiting) {
      const chunk = this.backlog.shift();
      if (!chunk) break;
      this.offer(chunk);
    }
  }

  /** Pushes bytes: taken now if the buffer takes them without asking to wait, else held. */
  private offer(bytes: Buffer): void {
    if (this.push(bytes)) {
      this.flow.taken(bytes.length);
    } else {
      this.waiting = true;
      this.held += bytes.length;
    }
  }
}

/**
 * Writes a stream's arriving bytes into a Writable (a process's stdin), granting more as each
 * write completes, so what waits here is at most one window. At most `MAX_WRITES` writes wait
 * in the Writable at once; what comes meanwhile waits in a backlog, in few chunks.
 */
export class CreditedSink {
  private readonly flow: ReceiveWindow;
  private readonly backlog = new Backlog();
  /** Writes given to the target that have not completed. */
  private writing = 0;
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
    if (bytes.length === 0) return true;
    if (this.ended || this.closed) {
      this.flow.taken(bytes.length);
    } else {
      this.backlog.add(own(bytes));
      this.pump();
    }
    return true;
  }

  /** End-of-file: the target ends once what came is written. */
  finish(): void {
    if (this.ended) return;
    this.ended = true;
    this.pump();
  }

  private get closed(): boolean {
    return this.target.destroyed || this.target.writableEnded;
  }

  /** Writes what waits, up to `MAX_WRITES` at once; ends the target once all is written. */
  private pump(): void {
    if (this.closed) return;
    while (this.writing < MAX_WRITES) {
      const chunk = this.backlog.shift();
      if (!chunk) break;
      this.writing++;
      this.target.write(chunk, () => {
        this.writing--;
        this.flow.taken(chunk.length);
        this.pump();
      });
    }
    if (this.ended && this.backlog.empty) this.target.end();
  }
}
