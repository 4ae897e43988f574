import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { CreditedReadable, CreditedSink } from '../src/flow.ts';

const WINDOW = 256 * 1024;

/** `n` one-byte frames counting up, as a process that writes a byte at a time would send them. */
function oneByteFrames(n: number): Buffer[] {
  return Array.from({ length: n }, (_, i) => Buffer.from([i % 251]));
}

function joined(frames: Buffer[]): Buffer {
  return Buffer.concat(frames);
}

describe('CreditedReadable', () => {
  it('holds a stalled reader’s window of one-byte frames in few chunks, and hands them on in order', async () => {
    const granted: number[] = [];
    const readable = new CreditedReadable(WINDOW, (bytes) => granted.push(bytes));
    const frames = oneByteFrames(WINDOW);
    expect(frames.every((frame) => readable.deliver(frame))).toBe(true);
    // The window is full: one byte more is an overrun.
    expect(readable.deliver(Buffer.from([0]))).toBe(false);
    // Nothing was read, so no more than the buffer's first bytes were granted.
    expect(granted.reduce((a, b) => a + b, 0)).toBeLessThan(WINDOW / 4);

    readable.finish();
    // Flowing, so each chunk held comes as a 'data' event of its own.
    const chunks: Buffer[] = [];
    readable.on('data', (chunk: Buffer) => chunks.push(chunk));
    await new Promise((resolve) => readable.once('end', resolve));
    expect(joined(chunks).equals(joined(frames))).toBe(true);
    // One by one, the frames would be 262,144 buffers; at most the high-water mark's worth are
    // held one by one, and the rest in chunks of up to 4,096 frames.
    expect(chunks.length).toBeLessThan(16 * 1024 + WINDOW / 4096 + 2);
  });

  it('grants the window again as its reader takes the bytes, and still hands large frames on whole', async () => {
    let granted = 0;
    const readable = new CreditedReadable(WINDOW, (bytes) => (granted += bytes));
    const large = Buffer.alloc(64 * 1024, 7);
    const frames = [...oneByteFrames(1000), large, ...oneByteFrames(1000), large];
    for (const frame of frames) readable.deliver(frame);
    const chunks: Buffer[] = [];
    const total = frames.reduce((a, f) => a + f.length, 0);
    let read = 0;
    let wanted = total;
    let arrived = () => {};
    readable.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      read += chunk.length;
      if (read === wanted) arrived();
    });
    await new Promise<void>((resolve) => (arrived = resolve));
    expect(joined(chunks).equals(joined(frames))).toBe(true);
    expect(chunks.filter((chunk) => chunk === large)).toHaveLength(2);
    // Grants go out a quarter window at a time: what is owed is under one batch.
    expect(granted).toBeGreaterThan(total - WINDOW / 4);
    expect(granted).toBeLessThanOrEqual(total);
    // The sender may send the window again once granted, and the reader gets it.
    const again = oneByteFrames(WINDOW - (total - granted));
    wanted = total + again.length;
    const more = new Promise<void>((resolve) => (arrived = resolve));
    expect(again.every((frame) => readable.deliver(frame))).toBe(true);
    await more;
    expect(joined(chunks).equals(joined([...frames, ...again]))).toBe(true);
  });
  it('keeps the order when its sender answers a grant at once, while the backlog is being handed on', async () => {
    const window = 1024;
    let sent = 0;
    const send = () => readable.deliver(Buffer.from([sent++ % 251]));
    const readable: CreditedReadable = new CreditedReadable(window, (bytes) => {
      for (let i = 0; i < bytes; i++) send();
    });
    readable.pause();
    while (sent < window) send();
    const read: number[] = [];
    await new Promise<void>((resolve) => {
      readable.on('data', (chunk: Buffer) => {
        read.push(...chunk);
        if (read.length < 4 * window) return;
        readable.pause();
        resolve();
      });
      readable.resume();
    });
    expect(read.findIndex((byte, i) => byte !== i % 251)).toBe(-1);
  });

  it('holds small frames in buffers of their own, not in slices of the shared pool, and passes over empty ones', async () => {
    const readable = new CreditedReadable(WINDOW, () => {});
    // One-byte Buffers are slices of Node's 8 KiB pool; each held slice would keep a block.
    const frames = oneByteFrames(20_000);
    expect(frames[0]!.buffer.byteLength).toBeGreaterThan(1);
    for (const frame of frames) {
      readable.deliver(frame);
      readable.deliver(Buffer.alloc(0));
    }
    readable.finish();
    const chunks: Buffer[] = [];
    readable.on('data', (chunk: Buffer) => chunks.push(chunk));
    await new Promise((resolve) => readable.once('end', resolve));
    expect(joined(chunks).equals(joined(frames))).toBe(true);
    expect(chunks.every((chunk) => chunk.length > 0)).toBe(true);
    expect(chunks.filter((chunk) => chunk.buffer.byteLength !== chunk.length)).toEqual([]);
  });
});

/** A process's stdin that takes nothing until `release`, counting the writes it is given. */
class StalledStdin extends Writable {
  writes = 0;
  readonly received: Buffer[] = [];
  private parked: (() => void)[] = [];
  private released = false;

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    this.writes++;
    this.received.push(chunk);
    if (this.released) done();
    else this.parked.push(done);
  }

  release(): void {
    this.released = true;
    for (const done of this.parked.splice(0)) done();
  }
}

describe('CreditedSink', () => {
  it('gives a stalled process’s stdin a window of one-byte frames in few writes, in order, and ends it after them', async () => {
    const stdin = new StalledStdin();
    let granted = 0;
    const sink = new CreditedSink(stdin, WINDOW, (bytes) => (granted += bytes));
    const frames = oneByteFrames(WINDOW);
    expect(frames.every((frame) => sink.deliver(frame))).toBe(true);
    expect(sink.deliver(Buffer.from([0]))).toBe(false);
    // The stalled stdin holds a handful of frames one by one; the rest wait gathered.
    expect(stdin.writableLength).toBeLessThanOrEqual(64);
    expect(granted).toBe(0);

    sink.finish();
    const finished = new Promise((resolve) => stdin.once('finish', resolve));
    stdin.release();
    await finished;
    expect(joined(stdin.received).equals(joined(frames))).toBe(true);
    // One by one, that would be 262,144 writes.
    expect(stdin.writes).toBeLessThan(64 + WINDOW / 4096 + 2);
    // Held in buffers of their own, not in slices of Node's pool.
    expect(stdin.received.filter((chunk) => chunk.buffer.byteLength !== chunk.length)).toEqual([]);
    expect(granted).toBeGreaterThan(WINDOW - WINDOW / 4);
  });

  it('grants as writes complete, so a sender may send the window again', async () => {
    const stdin = new StalledStdin();
    let granted = 0;
    const sink = new CreditedSink(stdin, WINDOW, (bytes) => (granted += bytes));
    const large = Buffer.alloc(100 * 1024, 3);
    for (const frame of [large, large]) expect(sink.deliver(frame)).toBe(true);
    expect(granted).toBe(0);
    stdin.release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(granted).toBe(2 * large.length);
    for (const frame of [large, large]) expect(sink.deliver(frame)).toBe(true);
    await new Promise((resolve) => setImmediate(resolve));
    expect(stdin.received).toHaveLength(4);
    expect(stdin.received.every((chunk) => chunk === large)).toBe(true);
  });
});
