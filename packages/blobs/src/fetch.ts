/**
 * Workers read the code or artifact of the attempts they hold (and the code of the session runs
 * they hold) through the control plane, a part at a time, instead of from the object store: a
 * worker's login reads no other job's blobs. A
 * worker asks on `ty.fetch.<worker>` for a key and a cursor; the control plane answers with the
 * part's bytes and the next cursor (`Trainyard-Next`), or with an error code
 * (`Trainyard-Error`) and no bytes.
 */
import { Readable } from 'node:stream';
import { headers, type Msg, type NatsConnection } from '@nats-io/nats-core';
import { isTransient, retry, Subjects } from '@trainyard/events';
import { z } from 'zod';
import type { BlobPart, BlobSource } from './types.ts';

export const FetchRequestSchema = z
  .object({
    key: z.string().max(4608),
    cursor: z.string().max(64).nullable(),
    /**
     * The job whose attempt the worker holds and reads for, where it is not the one the key
     * names: a shard reads what its array job was built into.
     */
    job: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,128}$/)
      .optional(),
  })
  .strict();
export type FetchRequest = z.infer<typeof FetchRequestSchema>;

/** Why a part was not given: `missing` is a blob that is not there; the others are refusals. */
export type FetchError = 'missing' | 'NOT_YOURS' | 'BAD_REQUEST' | 'BUSY' | 'UNAVAILABLE';

const NEXT = 'Trainyard-Next';
const ERROR = 'Trainyard-Error';
const FETCH_TIMEOUT_MS = 15_000;
/**
 * How long one part is asked for again while the control plane is busy or out of reach: a busy
 * control plane (many workers starting at once) delays a read rather than failing it.
 */
const FETCH_DEADLINE_MS = 120_000;

/** The job whose blob `key` is, when it is code or an artifact, which a worker may fetch. */
export function fetchableJob(key: string): string | null {
  return /^jobs\/([A-Za-z0-9_-]{1,64})\/(?:code|artifact\.tar\.gz)$/.exec(key)?.[1] ?? null;
}

/** The session whose code `key` is, which the worker that holds its run may fetch. */
export function fetchableSession(key: string): string | null {
  return /^sessions\/([A-Za-z0-9_-]{1,128})\/code$/.exec(key)?.[1] ?? null;
}

/**
 * The job and attempt whose output `key` is: a worker may fetch the outputs of the attempt
 * before its own, to restore them (its checkpoints) before it starts.
 */
export function fetchableOutput(key: string): { jobId: string; attemptId: string } | null {
  const m = /^jobs\/([A-Za-z0-9_-]{1,64})\/attempts\/([A-Za-z0-9_-]{1,128})\/outputs\/./.exec(key);
  return m ? { jobId: m[1]!, attemptId: m[2]! } : null;
}

/** Answers a fetch with a part, or with why there is none. */
export function answerFetch(msg: Msg, answer: BlobPart | FetchError): void {
  const h = headers();
  if (typeof answer === 'string') {
    h.set(ERROR, answer);
    msg.respond(new Uint8Array(), { headers: h });
    return;
  }
  h.set(NEXT, answer.next ?? '');
  msg.respond(answer.data, { headers: h });
}

/** A fetch the control plane refused: trying again would not change its answer. */
export class FetchRefusedError extends Error {
  override name = 'FetchRefusedError';
  constructor(
    readonly code: FetchError,
    key: string,
  ) {
    super(`the control plane refused to give ${key} (${code})`);
  }
}

/** A fetch the control plane could not answer now: asked again after a pause. */
class FetchBusyError extends Error {
  override name = 'FetchBusyError';
}

async function fetchPart(
  nc: NatsConnection,
  workerId: string,
  request: FetchRequest,
): Promise<BlobPart | null> {
  const ask = async () => {
    const msg = await nc.request(Subjects.fetch(workerId), JSON.stringify(request), {
      timeout: FETCH_TIMEOUT_MS,
    });
    const error = msg.headers?.get(ERROR) as FetchError | undefined;
    if (error === 'missing') return null;
    if (error === 'BUSY' || error === 'UNAVAILABLE') {
      throw new FetchBusyError(`the control plane could not give ${request.key} now (${error})`);
    }
    if (error) throw new FetchRefusedError(error, request.key);
    return { data: msg.data, next: msg.headers?.get(NEXT) || null };
  };
  return retry(ask, {
    attempts: Infinity,
    deadlineMs: FETCH_DEADLINE_MS,
    maxMs: 5_000,
    retryable: (err) => err instanceof FetchBusyError || isTransient(err),
  });
}

/**
 * Blobs as a worker reads them (for the attempt of `job` it holds): through the control plane,
 * which gives only the code and artifacts of the attempts that worker holds. Each part is asked for again after a transient
 * error or a busy answer, for up to two minutes; a blob replaced while it is read fails the read.
 */
export function fetchedBlobs(nc: NatsConnection, workerId: string, job?: string): BlobSource {
  return {
    async get(key: string): Promise<Readable | null> {
      // Named only where the key names another job, so that a control plane of the version
      // before reads what a worker asks for any other job.
      const keyJob = fetchableJob(key) ?? fetchableOutput(key)?.jobId;
      const held = job === undefined || keyJob === job ? {} : { job };
      const first = await fetchPart(nc, workerId, { key, cursor: null, ...held });
      if (!first) return null;
      async function* parts(): AsyncGenerator<Uint8Array> {
        let part: BlobPart = first!;
        yield part.data;
        while (part.next) {
          const next = await fetchPart(nc, workerId, { key, cursor: part.next, ...held });
          if (!next) throw new Error(`${key} was replaced or removed while it was read`);
          part = next;
          yield part.data;
        }
      }
      return Readable.from(parts(), { objectMode: false });
    },
  };
}
