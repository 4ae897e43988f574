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
  /**
   * One part of the blob, from `cursor` on (null: its start), and the cursor of the part after
   * it (null: this was the last); null when there is no such key, or `cursor` is none of its.
   * The blob may be read by another process, a part at a time, each asked for by cursor.
   */
  readPart(key: string, cursor: string | null): Promise<BlobPart | null>;
  /** The blob's size, or null when there is no such key. */
  stat(key: string): Promise<{ sizeBytes: number } | null>;
  delete(key: string): Promise<void>;
  /**
   * Where worker `name` keeps what it writes (outputs, archived logs): a bucket of its own, which
   * the control plane made for it and which no other worker may write, where the store has
   * buckets per worker (NATS). A worker with no bucket of its own (one on the control login, or a
   * store with one bucket for all, S3) writes to this store: `orShared` says to fall back to it,
   * else a missing bucket is an error that says what to do.
   */
  ofWorker(name: string, opts?: { orShared?: boolean }): Promise<BlobStore>;
}

/** A part of a blob, and where the next starts. */
export interface BlobPart {
  data: Uint8Array;
  next: string | null;
}

/** Where blobs are read from: a store, or the control plane on a worker's behalf. */
export type BlobSource = Pick<BlobStore, 'get'>;

/** Blob keys, in one place. */
export const BlobKeys = {
  code: (jobId: string) => `jobs/${jobId}/code`,
  /** The code a session was requested with. */
  sessionCode: (sessionId: string) => `sessions/${sessionId}/code`,
  artifact: (jobId: string) => `jobs/${jobId}/artifact.tar.gz`,
  /** An output file of one attempt: each attempt's outputs are its own, so none overwrites another's. */
  attemptOutput: (jobId: string, attemptId: string, path: string) =>
    `jobs/${jobId}/attempts/${attemptId}/outputs/${path}`,
  /** An output file as workers kept them before each attempt's were its own. */
  output: (jobId: string, path: string) => `jobs/${jobId}/outputs/${path}`,
  log: (jobId: string, attempt: number) => `jobs/${jobId}/logs/${attempt}.log`,
  /** The log of a gang's member of rank 1 and on: rank 0's is the attempt's. */
  memberLog: (jobId: string, attempt: number, rank: number) =>
    `jobs/${jobId}/logs/${attempt}-r${rank}.log`,
} as const;

/**
 * A blob worker `workerId` wrote (an output, an archived log), from its bucket; else from the
 * shared store, where workers without a bucket of their own write, and where every worker wrote
 * before workers had buckets.
 */
export async function getWritten(
  blobs: BlobStore,
  workerId: string | null | undefined,
  key: string,
): Promise<Readable | null> {
  const own = workerId ? await blobs.ofWorker(workerId, { orShared: true }) : blobs;
  return (await own.get(key)) ?? (own === blobs ? null : await blobs.get(key));
}

/** Stores a local file under `key`, reading it afresh for each try after a transient error. */
export async function putFile(store: BlobStore, key: string, path: string): Promise<BlobRef> {
  const { size } = await stat(path);
  return retryTransient(`store ${key}`, () => store.put(key, createReadStream(path), size));
}
