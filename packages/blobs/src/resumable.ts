import type {
  ReadableStream,
  ReadableStreamDefaultReader,
  ReadableStreamReadResult,
} from 'node:stream/web';
import { Readable } from 'node:stream';

export interface ResumableReadOptions {
  /** A read that gets no bytes for this long is dropped and opened again. */
  idleMs: number;
  /** How many times the blob is opened in all before the read fails. */
  opens: number;
  /** Whether a read that failed with `err` may be opened again. */
  retryable: (err: unknown) => boolean;
}

/** A read that got nothing for its idle time. */
export class BlobReadIdleError extends Error {
  override readonly name = 'BlobReadIdleError';
}

async function readWithin<T>(
  reader: ReadableStreamDefaultReader<T>,
  ms: number,
  what: string,
): Promise<ReadableStreamReadResult<T>> {
  let timer: NodeJS.Timeout | undefined;
  const idle = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new BlobReadIdleError(`${what}: no bytes for ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([reader.read(), idle]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The bytes of an immutable blob as one stream that survives its source going quiet or
 * failing: the blob is opened again (`open`, given the first source already opened) and the
 * bytes already passed on are skipped, a bounded number of times. A server that dies mid-read
 * can leave a read waiting forever; this turns that into a fresh read, or a clear error.
 */
export function resumableRead(
  what: string,
  first: ReadableStream<Uint8Array>,
  open: () => Promise<ReadableStream<Uint8Array> | null>,
  opts: ResumableReadOptions,
): Readable {
  async function* bytes(): AsyncGenerator<Uint8Array> {
    let passed = 0;
    let source: ReadableStream<Uint8Array> | null = first;
    for (let opened = 1; ; opened++) {
      if (!source) throw new Error(`${what}: the blob is gone`);
      const reader = source.getReader();
      let skip = passed;
      let finished = false;
      try {
        for (;;) {
          const next = await readWithin(reader, opts.idleMs, what);
          if (next.done) {
            finished = true;
            return;
          }
          let chunk = next.value;
          if (skip > 0) {
            const dropped = Math.min(skip, chunk.length);
            skip -= dropped;
            chunk = chunk.subarray(dropped);
            if (chunk.length === 0) continue;
          }
          passed += chunk.length;
          yield chunk;
        }
      } catch (err) {
        if (opened >= opts.opens || !(err instanceof BlobReadIdleError || opts.retryable(err))) {
          throw err;
        }
      } finally {
        if (!finished) reader.cancel().catch(() => undefined);
      }
      source = await open();
    }
  }
  return Readable.from(bytes(), { objectMode: false });
}
