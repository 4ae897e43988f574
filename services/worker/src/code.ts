/**
 * A job's or a session's code on the worker: fetched, checked, unpacked by the archive rules,
 * and given to the user it runs as.
 */
import { lchownSync, readdirSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { failure } from '@trainyard/domain';
import type { CodeArchive, Failure } from '@trainyard/events';
import {
  ArchiveError,
  type ArchiveLimits,
  fetchVerified,
  unpackArchive,
  type BlobSource,
} from '@trainyard/blobs';
import type { JobUser } from './users.ts';

/** What went wrong preparing a run's directory, as the failure it is reported as. */
export class SandboxError extends Error {
  override name = 'SandboxError';
  constructor(readonly failure: Failure) {
    super(failure.message);
  }
}

/**
 * Fetches a code archive (checked against its size and sha256) into `scratch`, unpacks it into
 * `into` by the archive rules and removes it. A blob that is missing or not the one given, or an
 * archive the rules refuse, is a `SandboxError`.
 */
export async function unpackCode(
  blobs: BlobSource,
  source: CodeArchive,
  scratch: string,
  into: string,
  limits: ArchiveLimits,
): Promise<void> {
  const archive = join(scratch, `code.${source.format}`);
  const fetched = await fetchVerified(blobs, source, archive);
  if (fetched !== 'fetched') {
    await rm(archive, { force: true });
    throw new SandboxError(
      failure(
        'artifactUnavailable',
        fetched === 'missing'
          ? `blob ${source.key} is missing`
          : `blob ${source.key} is not the one given (its size or sha256 differs)`,
      ),
    );
  }
  try {
    await unpackArchive(archive, source.format, into, limits);
  } catch (err) {
    if (err instanceof ArchiveError) throw new SandboxError(failure('badArchive', err.message));
    throw err;
  } finally {
    await rm(archive, { force: true });
  }
}

/** Gives `dir` and everything under it to `user`, links themselves rather than their targets. */
export function chownTree(dir: string, user: JobUser): void {
  lchownSync(dir, user.uid, user.gid);
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) chownTree(path, user);
    else lchownSync(path, user.uid, user.gid);
  }
}
