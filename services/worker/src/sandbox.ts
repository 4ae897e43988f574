import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { failure } from '@trainyard/domain';
import type { Failure } from '@trainyard/events';
import {
  ArchiveError,
  streamToFile,
  unpackArchive,
  type BlobStore,
  type RunAttempt,
} from '@trainyard/platform';

export interface Sandbox {
  root: string;
  workDir: string;
  outputDir: string;
  logFile: string;
}

export class SandboxError extends Error {
  override name = 'SandboxError';
  constructor(readonly failure: Failure) {
    super(failure.message);
  }
}

/** Lays out an attempt's directory and unpacks its code (the build's artifact, or the upload). */
export async function prepareSandbox(
  root: string,
  msg: RunAttempt,
  blobs: BlobStore,
): Promise<Sandbox> {
  const dir = join(root, `${msg.jobId}-${msg.attempt}`);
  const box: Sandbox = {
    root: dir,
    workDir: join(dir, 'work'),
    outputDir: join(dir, 'outputs'),
    logFile: join(dir, 'attempt.log'),
  };
  await rm(dir, { recursive: true, force: true });
  try {
    await fill(box, msg, blobs);
    return box;
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

async function fill(box: Sandbox, msg: RunAttempt, blobs: BlobStore): Promise<void> {
  await mkdir(box.workDir, { recursive: true });
  await mkdir(box.outputDir, { recursive: true });
  const source = msg.artifact
    ? { key: msg.artifact.key, format: 'tar.gz' as const }
    : msg.code && { key: msg.code.key, format: msg.code.format };
  if (!source) return;
  const blob = await blobs.get(source.key);
  if (!blob)
    throw new SandboxError(failure('artifactUnavailable', `blob ${source.key} is missing`));
  const archive = join(box.root, `code.${source.format}`);
  await streamToFile(blob, archive);
  try {
    await unpackArchive(archive, source.format, box.workDir);
  } catch (err) {
    if (err instanceof ArchiveError) throw new SandboxError(failure('badArchive', err.message));
    throw err;
  } finally {
    await rm(archive, { force: true });
  }
}

/** Removes an attempt's directory once its outputs and log are kept elsewhere. */
export async function removeSandbox(box: Sandbox | null): Promise<void> {
  if (box) await rm(box.root, { recursive: true, force: true });
}

const MARKER = 'attempt.json';

/** Records which process runs in a sandbox, so that a restarted worker can find it. */
export async function markSandbox(
  box: Sandbox,
  attemptId: string,
  pid: number | undefined,
): Promise<void> {
  await writeFile(join(box.root, MARKER), JSON.stringify({ attemptId, pid: pid ?? null }));
}

/**
 * Kills what an earlier run of this worker left behind (each attempt's whole process group) and
 * removes its sandboxes. A worker that starts owns no attempt yet: the scheduler fails those
 * the log still gives it, and they are retried.
 */
export async function reapOrphans(root: string): Promise<{ killed: number; removed: number }> {
  let killed = 0;
  let removed = 0;
  for (const entry of await readdir(root, { withFileTypes: true }).catch(() => [])) {
    if (!entry.isDirectory()) continue;
    const dir = join(root, entry.name);
    const marker = await readFile(join(dir, MARKER), 'utf8').catch(() => null);
    const pid = marker ? (JSON.parse(marker) as { pid: number | null }).pid : null;
    if (pid) {
      try {
        process.kill(-pid, 'SIGKILL');
        killed++;
      } catch {
        /* the process group is already gone */
      }
    }
    await rm(dir, { recursive: true, force: true });
    removed++;
  }
  return { killed, removed };
}
