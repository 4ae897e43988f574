import type { Readable } from 'node:stream';
import type { BlobRef } from '@trainyard/events';

/** Where code archives, build artifacts, outputs and archived logs are kept. */
export interface BlobStore {
  readonly kind: string;
  /** Stores `data` under `key`, replacing what was there; returns its size and sha256. */
  put(key: string, data: Readable | Uint8Array): Promise<BlobRef>;
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
