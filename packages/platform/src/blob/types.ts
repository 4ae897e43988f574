import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { retryTransient, type BlobRef } from '@trainyard/events';

/** Where code archives, build artifacts, outputs and archived logs are kept. */
export interface BlobStore {
  readonly kind: string;
  /**
   * Stores `data` under `key`, replacing what was there; returns its size and sha256. Pass
   * `sizeBytes` when it is known: S3 then uploads in one request instead of in parts.
   */
  put(key: string, data: Readable | Uint8Array, sizeBytes?: number): Promise<BlobRef>;
  /** The blob's bytes, or null when there is no such key. */
  get(key: string): Promise<Readable | null>;
  /** The blob's size, or null when there is no such key. */
  stat(key: string): Promise<{ sizeBytes: number } | null>;
  delete(key: string): Promise<void>;
}

/** Blob keys, in one place. */
export const BlobKeys = {
  code: (jobId: string) => `jobs/${jobId}/code`,
  artifact: (jobId: string) => `jobs/${jobId}/artifact.tar.gz`,
  output: (jobId: string, path: string) => `jobs/${jobId}/outputs/${path}`,
  log: (jobId: string, attempt: number) => `jobs/${jobId}/logs/${attempt}.log`,
} as const;

/** Stores a local file under `key`, reading it afresh for each try after a transient error. */
export async function putFile(store: BlobStore, key: string, path: string): Promise<BlobRef> {
  const { size } = await stat(path);
  return retryTransient(`store ${key}`, () => store.put(key, createReadStream(path), size));
}
