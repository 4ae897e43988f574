import { mkdirSync, rmdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { failure } from '@trainyard/domain';
import type { Failure } from '@trainyard/events';
import {
  ArchiveError,
  type ArchiveLimits,
  streamToFile,
  unpackArchive,
  type BlobStore,
  recordedPid,
  RunAttemptSchema,
  type RunAttempt,
  type RunSpec,
} from '@trainyard/platform';

export interface Sandbox {
  root: string;
  workDir: string;
  outputDir: string;
  /** The command's output, written by the process itself. */
  logFile: string;
  /** The command's exit code, once it has ended. */
  exitFile: string;
  /** The process group the command runs in, recorded by the process as it starts. */
  pidFile: string;
  /** The script the runtime starts the command with. */
  scriptFile: string;
}

function sandboxAt(dir: string): Sandbox {
  return {
    root: dir,
    workDir: join(dir, 'work'),
    outputDir: join(dir, 'outputs'),
    logFile: join(dir, 'attempt.log'),
    exitFile: join(dir, 'attempt.exit'),
    pidFile: join(dir, 'attempt.pid'),
    scriptFile: join(dir, 'attempt.sh'),
  };
}

/** What the runtime needs to run `msg`'s attempt in `box`. */
export function runSpecIn(box: Sandbox, msg: RunAttempt): RunSpec {
  return {
    jobId: msg.jobId,
    attemptId: msg.attemptId,
    attempt: msg.attempt,
    command: msg.command,
    env: msg.env,
    workDir: box.workDir,
    outputDir: box.outputDir,
    logFile: box.logFile,
    exitFile: box.exitFile,
    pidFile: box.pidFile,
    scriptFile: box.scriptFile,
    gpus: msg.gpus,
  };
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
  limits: ArchiveLimits,
): Promise<Sandbox> {
  const dir = join(root, `${msg.jobId}-${msg.attempt}`);
  const box = sandboxAt(dir);
  await makeDirectory(dir);
  try {
    await fill(box, msg, blobs, limits);
    return box;
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** Makes an attempt's directory afresh: what an earlier try of it left there is removed. */
async function makeDirectory(dir: string): Promise<void> {
  try {
    mkdirSync(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') await rm(dir, { recursive: true, force: true });
    else if (code !== 'ENOENT') throw err;
    mkdirSync(dir, { recursive: true });
  }
}

/**
 * Its directories and small files are made, and removed, with synchronous calls: on the
 * sandbox's local disk each costs the event loop less than a round trip through the thread pool.
 */
async function fill(
  box: Sandbox,
  msg: RunAttempt,
  blobs: BlobStore,
  limits: ArchiveLimits,
): Promise<void> {
  mkdirSync(box.workDir);
  mkdirSync(box.outputDir);
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
    await unpackArchive(archive, source.format, box.workDir, limits);
  } catch (err) {
    if (err instanceof ArchiveError) throw new SandboxError(failure('badArchive', err.message));
    throw err;
  } finally {
    await rm(archive, { force: true });
  }
}

/**
 * Removes an attempt's directory once its outputs and log are kept elsewhere: the files the
 * worker and the script make, one by one, then the directories, each walked and emptied only if
 * the command left something in it.
 */
export async function removeSandbox(box: Sandbox | null): Promise<void> {
  if (!box) return;
  for (const file of [box.scriptFile, box.logFile, box.pidFile, box.exitFile, markerOf(box)])
    unlinkIfThere(file);
  for (const dir of [box.workDir, box.outputDir, box.root]) {
    try {
      rmdirSync(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
        await rm(dir, { recursive: true, force: true });
    }
  }
}

/** Removes a file if there is one; what stays behind goes with its directory. */
function unlinkIfThere(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    return;
  }
}

const MARKER = 'attempt.json';

function markerOf(box: Sandbox): string {
  return join(box.root, MARKER);
}

/** What a sandbox records about the attempt that runs in it, and its process group. */
export interface SandboxMarker {
  msg: RunAttempt;
  pid: number | null;
  startedAt: number;
}

/**
 * Records which attempt is about to run in a sandbox, so that a restarted worker can take it
 * over; the process records its own group id beside it as it starts. Readable by the worker's
 * user only: the dispatch carries the job's environment.
 */
export function markSandbox(box: Sandbox, msg: RunAttempt, startedAt: number): void {
  writeFileSync(markerOf(box), JSON.stringify({ msg, startedAt }), { mode: 0o600 });
}

/** Kills an attempt's whole process group, if it still runs. */
export function killGroup(pid: number | null): boolean {
  if (!pid) return false;
  try {
    process.kill(-pid, 'SIGKILL');
    return true;
  } catch {
    return false;
  }
}

/**
 * The sandboxes an earlier run of this worker left with a started process in them. Any other
 * directory under `root` (an attempt that never started, a half-written marker, one this
 * version cannot take over) is removed, and a process group it names is killed. The process
 * group comes from the process's own record (older markers held it themselves).
 */
export async function leftSandboxes(
  root: string,
): Promise<{ box: Sandbox; marker: SandboxMarker }[]> {
  const found: { box: Sandbox; marker: SandboxMarker }[] = [];
  for (const entry of await readdir(root, { withFileTypes: true }).catch(() => [])) {
    if (!entry.isDirectory()) continue;
    const box = sandboxAt(join(root, entry.name));
    const text = await readFile(markerOf(box), 'utf8').catch(() => null);
    const marker = text ? parseMarker(text) : null;
    const pid = (await recordedPid(box.pidFile)) ?? marker?.pid ?? null;
    if (pid && marker?.msg) {
      found.push({ box, marker: { msg: marker.msg, pid, startedAt: marker.startedAt } });
      continue;
    }
    killGroup(pid);
    await rm(box.root, { recursive: true, force: true });
  }
  return found;
}

/** A marker as written, or what is left of one written by another version: its pid, at least. */
function parseMarker(
  text: string,
): { msg: RunAttempt | null; pid: number | null; startedAt: number } | null {
  try {
    const raw = JSON.parse(text) as { msg?: unknown; pid?: unknown; startedAt?: unknown };
    const msg = RunAttemptSchema.safeParse(raw.msg);
    return {
      msg: msg.success ? msg.data : null,
      pid: typeof raw.pid === 'number' ? raw.pid : null,
      startedAt: typeof raw.startedAt === 'number' ? raw.startedAt : Date.now(),
    };
  } catch {
    return null;
  }
}
