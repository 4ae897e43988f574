import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { BlobRef } from '@trainyard/events';
import type { BlobSource } from './types.ts';

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

/**
 * Writes a blob to a new file readable by its owner alone, and says whether it is the one `ref`
 * names (its size and sha256): a blob someone replaced in the store is refused, not run.
 */
export async function fetchVerified(
  blobs: BlobSource,
  ref: BlobRef,
  file: string,
): Promise<'fetched' | 'missing' | 'changed'> {
  const blob = await blobs.get(ref.key);
  if (!blob) return 'missing';
  const hashed = hashing(blob);
  await pipeline(hashed, createWriteStream(file, { mode: 0o600 }));
  return hashed.sizeBytes === ref.sizeBytes && hashed.digest() === ref.sha256
    ? 'fetched'
    : 'changed';
}
