import { ReadableStream } from 'node:stream/web';
import type { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { BlobReadIdleError, resumableRead } from '../src/resumable.ts';

const bytes = (s: string) => new TextEncoder().encode(s);

/** A source that sends `chunks`, then ends, or, with `hang`, goes quiet for good. */
function source(chunks: string[], hang = false) {
  const seen = { cancelled: false };
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      for (const chunk of chunks) c.enqueue(bytes(chunk));
      if (!hang) c.close();
    },
    cancel() {
      seen.cancelled = true;
    },
  });
  return { stream, seen };
}

async function text(r: Readable): Promise<string> {
  let out = '';
  for await (const c of r) out += Buffer.from(c as Uint8Array).toString();
  return out;
}

const opts = { idleMs: 50, opens: 3, retryable: () => false };

describe('resumable blob read', () => {
  it('opens a read that went quiet again and passes on only the bytes not yet passed', async () => {
    const first = source(['hel', 'lo '], true);
    let opens = 0;
    const read = resumableRead(
      'read x',
      first.stream,
      async () => {
        opens++;
        return source(['he', 'llo wor', 'ld']).stream;
      },
      opts,
    );
    expect(await text(read)).toBe('hello world');
    expect(opens).toBe(1);
    expect(first.seen.cancelled).toBe(true);
  });

  it('fails with a clear error once it has opened the blob as often as allowed', async () => {
    let opens = 0;
    const read = resumableRead(
      'read x',
      source(['a'], true).stream,
      async () => {
        opens++;
        return source(['a'], true).stream;
      },
      opts,
    );
    await expect(text(read)).rejects.toBeInstanceOf(BlobReadIdleError);
    expect(opens).toBe(2);
  });

  it('opens again after an error only when it is one that may pass', async () => {
    const failing = () =>
      new ReadableStream<Uint8Array>({
        pull(c) {
          c.error(new Error('digests do not match'));
        },
      });
    let opens = 0;
    const again = async () => {
      opens++;
      return source(['ok']).stream;
    };
    await expect(text(resumableRead('read x', failing(), again, opts))).rejects.toThrow(
      'digests do not match',
    );
    expect(opens).toBe(0);
    const retrying = resumableRead('read x', failing(), again, { ...opts, retryable: () => true });
    expect(await text(retrying)).toBe('ok');
    expect(opens).toBe(1);
  });
});
