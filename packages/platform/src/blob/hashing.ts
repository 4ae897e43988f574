import { createHash } from 'node:crypto';
import { Readable, Transform } from 'node:stream';

/** A pass-through that counts and hashes what flows through it. */
export class HashingStream extends Transform {
  readonly #hash = createHash('sha256');
  sizeBytes = 0;

  override _transform(
    chunk: Buffer,
    _enc: BufferEncoding,
    done: (e?: Error | null, d?: Buffer) => void,
  ) {
    this.#hash.update(chunk);
    this.sizeBytes += chunk.length;
    done(null, chunk);
  }

  digest(): string {
    return this.#hash.digest('hex');
  }
}

/** Turns bytes or a stream into a stream that hashes as it is read. */
export function hashing(data: Readable | Uint8Array): HashingStream {
  const source = data instanceof Uint8Array ? Readable.from([Buffer.from(data)]) : data;
  const hasher = new HashingStream();
  source.on('error', (err) => hasher.destroy(err));
  return source.pipe(hasher);
}
