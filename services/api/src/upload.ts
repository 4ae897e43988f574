import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import type { z } from 'zod';
import type { CodeArchive } from '@trainyard/events';
import {
  ArchiveError,
  inspectArchive,
  type ArchiveLimits,
  putFile,
  sniffFile,
  type BlobStore,
} from '@trainyard/blobs';
import { ApiError } from './errors.ts';

/** An uploaded code archive parked on local disk until the spec has been accepted. */
export interface StagedUpload {
  file: string;
  format: 'zip' | 'tar.gz';
  discard(): Promise<void>;
}

/**
 * Writes the upload to a file in a directory of its own (mkdtemp: 0700), readable by the API's
 * user alone, and checks it is a zip or a gzipped tarball that obeys
 * the archive rules (read from its directory: nothing is unpacked here), so that a bad archive
 * is refused at once rather than failing the job's build.
 */
export async function stageUpload(
  stream: Readable & { truncated?: boolean },
  limits: ArchiveLimits,
): Promise<StagedUpload> {
  const dir = await mkdtemp(join(tmpdir(), 'trainyard-upload-'));
  const file = join(dir, 'code');
  const discard = () => rm(dir, { recursive: true, force: true });
  try {
    await pipeline(stream, createWriteStream(file, { flags: 'wx', mode: 0o600 }));
    if (stream.truncated) throw new ApiError('PAYLOAD_TOO_LARGE', 'the code archive is too large');
    const format = await sniffFile(file);
    if (!format) throw new ArchiveError('code must be a .zip or .tar.gz archive');
    await inspectArchive(file, format, limits);
    return { file, format, discard };
  } catch (err) {
    await discard();
    throw err;
  }
}

/** Moves a staged upload into the blob store at `key`, as code. */
export async function keepUpload(
  blobs: BlobStore,
  key: string,
  staged: StagedUpload,
): Promise<CodeArchive> {
  try {
    const ref = await putFile(blobs, key, staged.file);
    return { ...ref, format: staged.format };
  } finally {
    await staged.discard();
  }
}

/** A spec, as JSON text or a parsed body, checked against `schema`; fields named `spec.…`. */
function parseSpec<T>(raw: unknown, schema: z.ZodType<T>): T {
  let value = raw;
  if (typeof raw === 'string') {
    try {
      value = JSON.parse(raw);
    } catch {
      throw new ApiError('VALIDATION_FAILED', 'spec: must be JSON');
    }
  }
  const result = schema.safeParse(value);
  if (!result.success) {
    const details = result.error.issues.map((i) => ({
      field: `spec.${i.path.join('.')}`,
      message: i.message,
    }));
    throw new ApiError(
      'VALIDATION_FAILED',
      `${details[0]!.field}: ${details[0]!.message}`,
      details,
    );
  }
  return result.data;
}

/**
 * A submission: a JSON spec alone, or multipart with a `spec` field (JSON) and a `code` file,
 * staged and checked by the archive rules. Any other field is refused, and what was staged
 * discarded.
 */
export async function readSubmission<T>(
  req: FastifyRequest,
  limits: ArchiveLimits,
  schema: z.ZodType<T>,
): Promise<{ spec: T; staged?: StagedUpload }> {
  if (!req.isMultipart()) return { spec: parseSpec(req.body, schema) };
  let spec: T | undefined;
  let staged: StagedUpload | undefined;
  try {
    for await (const part of req.parts()) {
      if (part.type === 'field' && part.fieldname === 'spec') spec = parseSpec(part.value, schema);
      else if (part.type === 'file' && part.fieldname === 'code' && !staged)
        staged = await stageUpload(part.file, limits);
      else {
        if (part.type === 'file') part.file.resume();
        throw new ApiError('VALIDATION_FAILED', `${part.fieldname}: unexpected field`);
      }
    }
    if (spec === undefined) throw new ApiError('VALIDATION_FAILED', 'spec: required');
    return { spec, ...(staged && { staged }) };
  } catch (err) {
    await staged?.discard();
    throw err;
  }
}
