import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import type { CodeArchive } from '@trainyard/events';
import {
  ArchiveError,
  BlobKeys,
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

/** Moves a staged upload into the blob store as the job's code. */
export async function keepUpload(
  blobs: BlobStore,
  jobId: string,
  staged: StagedUpload,
): Promise<CodeArchive> {
  try {
    const ref = await putFile(blobs, BlobKeys.code(jobId), staged.file);
    return { ...ref, format: staged.format };
  } finally {
    await staged.discard();
  }
}
