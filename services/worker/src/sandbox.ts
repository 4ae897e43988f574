import { chmodSync, mkdirSync, rmdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { failure } from '@trainyard/domain';
import type { JobUser } from './users.ts';
import { type Gpu, RunAttemptSchema, type RunAttempt } from '@trainyard/events';
import { BlobKeys, type ArchiveLimits, fetchVerified, type BlobSource } from '@trainyard/blobs';
import { installProbe, recordedPid, type RunSpec } from '@trainyard/runtime';
import { chownTree, SandboxError, unpackCode } from './code.ts';

export interface Sandbox {
  root: string;
  workDir: string;
  outputDir: string;
  /** Where the job may write its metrics file: its own, so that it cannot be made a link. */
  metricsDir: string;
  metricsFile: string;
  /** How far the attempt's metrics sent go (the worker's own). */
  metricsProgress: string;
  /** The command's output, written by the process itself. */
  logFile: string;
  /** The command's exit code, once it has ended. */
  exitFile: string;
  /** The process group the command runs in, recorded by the process as it starts. */
  pidFile: string;
  /** When the grace of a stop of the attempt ends (the worker's own). */
  stopFile: string;
  /** The script the runtime starts the command with. */
  scriptFile: string;
  /** What the runtime's launcher reads to start it. */
  launchFile: string;
  /** The attempt's own scratch directory, where its script records how its command ended. */
  runDir: string;
  resultFile: string;
  /** Where a probe's wrapper and report live, when the attempt is a probe. */
  probeDir: string;
}

function sandboxAt(dir: string): Sandbox {
  return {
    root: dir,
    workDir: join(dir, 'work'),
    outputDir: join(dir, 'outputs'),
    metricsDir: join(dir, 'metrics'),
    metricsFile: join(dir, 'metrics', 'metrics.jsonl'),
    metricsProgress: join(dir, 'metrics.progress'),
    logFile: join(dir, 'attempt.log'),
    exitFile: join(dir, 'attempt.exit'),
    pidFile: join(dir, 'attempt.pid'),
    stopFile: join(dir, 'attempt.stop'),
    scriptFile: join(dir, 'attempt.sh'),
    launchFile: join(dir, 'attempt.launch'),
    runDir: join(dir, 'run'),
    resultFile: join(dir, 'run', 'result'),
    probeDir: join(dir, 'probe'),
  };
}

/**
 * What a dispatched run may use, as a runtime limits it: its GPUs by UUID (where the worker
 * knows them all), its memory and its CPUs.
 */
export function limitsOf(
  msg: { gpus: number[]; resources?: { memoryGb?: number; cpus?: number } },
  gpus: readonly Gpu[],
): { gpuUuids?: string[]; memoryBytes?: number; cpus?: number } {
  const memoryGb = msg.resources?.memoryGb;
  const uuids = msg.gpus.map((i) => gpus.find((g) => g.index === i)?.uuid ?? '');
  return {
    ...(uuids.length > 0 && uuids.every(Boolean) && { gpuUuids: uuids }),
    ...(memoryGb && { memoryBytes: Math.floor(memoryGb * 1024 ** 3) }),
    ...(msg.resources?.cpus && { cpus: msg.resources.cpus }),
  };
}

/**
 * What the runtime needs to run `msg`'s attempt in `box`, as `user` when there is one. `gpus`
 * are the worker's, to name the attempt's by UUID.
 */
export function runSpecIn(
  box: Sandbox,
  msg: RunAttempt,
  user?: JobUser,
  gpus: readonly Gpu[] = [],
): RunSpec {
  return {
    ...(user && { user }),
    ...(msg.setup && { setup: msg.setup }),
    ...(msg.image && { image: msg.image }),
    ...(msg.restore?.files.length && { resumed: true }),
    ...limitsOf(msg, gpus),
    ...(msg.probe && {
      probe: {
        dir: box.probeDir,
        maxSteps: msg.probe.maxSteps,
        plateauSteps: msg.probe.plateauSteps,
      },
    }),
    jobId: msg.jobId,
    attemptId: msg.attemptId,
    attempt: msg.attempt,
    command: msg.command,
    env: msg.env,
    workDir: box.workDir,
    outputDir: box.outputDir,
    metricsFile: box.metricsFile,
    logFile: box.logFile,
    exitFile: box.exitFile,
    pidFile: box.pidFile,
    stopFile: box.stopFile,
    scriptFile: box.scriptFile,
    launchFile: box.launchFile,
    resultFile: box.resultFile,
    gpus: msg.gpus,
  };
}

const SAFE_ID = /^[A-Za-z0-9_-]{1,128}$/;

/** The directory of `msg`'s attempt under `root`; ids that could leave it are refused. */
export function sandboxDir(root: string, msg: Pick<RunAttempt, 'jobId' | 'attempt'>): string {
  if (!SAFE_ID.test(msg.jobId) || !Number.isInteger(msg.attempt) || msg.attempt < 1)
    throw new SandboxError(
      failure('launchError', `not an attempt id: ${msg.jobId}-${msg.attempt}`),
    );
  return join(root, `${msg.jobId}-${msg.attempt}`);
}

/** Where `box` lives: the sandbox's directory, which names it in the uid lock. */
export const sandboxOf = (root: string, msg: Pick<RunAttempt, 'jobId' | 'attempt'>) =>
  sandboxAt(sandboxDir(root, msg));

/**
 * Lays out an attempt's directory and unpacks its code (the build's artifact, or the upload).
 * With `user`, the attempt's own directories (work, outputs, run, a probe's) and all in them are
 * its, closed to everyone else; the directory itself stays the worker's, passable (0711) but
 * not listable, holding the files only the worker writes: the log, the process group, the end.
 */
export async function prepareSandbox(
  root: string,
  msg: RunAttempt,
  blobs: BlobSource,
  limits: ArchiveLimits,
  user?: JobUser,
): Promise<Sandbox> {
  const dir = sandboxDir(root, msg);
  const box = sandboxAt(dir);
  await makeDirectory(dir);
  try {
    chmodSync(dir, 0o711);
    await fill(box, msg, blobs, limits);
    const own = [
      box.workDir,
      box.outputDir,
      box.metricsDir,
      box.runDir,
      ...(msg.probe ? [box.probeDir] : []),
    ];
    if (user) for (const d of own) chownTree(d, user);
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
  blobs: BlobSource,
  limits: ArchiveLimits,
): Promise<void> {
  mkdirSync(box.workDir, { mode: 0o700 });
  mkdirSync(box.outputDir, { mode: 0o700 });
  mkdirSync(box.metricsDir, { mode: 0o700 });
  mkdirSync(box.runDir, { mode: 0o700 });
  if (msg.probe) installProbe(box.probeDir);
  await restoreOutputs(box, msg, blobs);
  // A job in a container has its code in its image.
  if (msg.image) return;
  const source = msg.artifact ? { ...msg.artifact, format: 'tar.gz' as const } : msg.code;
  if (source) await unpackCode(blobs, source, box.root, box.workDir, limits);
}

/** Whether a path from an output manifest stays inside the output directory. */
const insideOutputs = (path: string) =>
  path.split('/').every((part) => part !== '' && part !== '.' && part !== '..');

/**
 * Restores the outputs of the attempt before (its checkpoints) into this one's output directory,
 * each checked against its sha256, so that the job resumes from them. Fetched through the
 * control plane, which gives them only to the worker that holds the job's live attempt. A file
 * that is gone is left out: the job resumes from what there is rather than fail for good. One
 * that is newer than its last report (its worker stored it again, then went before it reported
 * it) is taken as it is: it is that attempt's own, and its latest. One the control plane cannot
 * give now fails the start, which is tried again.
 */
async function restoreOutputs(box: Sandbox, msg: RunAttempt, blobs: BlobSource): Promise<void> {
  const restore = msg.restore;
  for (const file of restore?.files ?? []) {
    if (!insideOutputs(file.path)) continue;
    const target = join(box.outputDir, ...file.path.split('/'));
    mkdirSync(dirname(target), { recursive: true, mode: 0o700 });
    const ref = {
      key: BlobKeys.attemptOutput(msg.jobId, restore!.attemptId, file.path),
      sizeBytes: file.sizeBytes,
      sha256: file.sha256,
    };
    if ((await fetchVerified(blobs, ref, target)) === 'missing') await rm(target, { force: true });
  }
}

/**
 * Removes an attempt's directory once its outputs and log are kept elsewhere: the files the
 * worker and the script make, one by one, then the directories, each walked and emptied only if
 * the command left something in it.
 */
export async function removeSandbox(box: Sandbox | null): Promise<void> {
  if (!box) return;
  for (const file of [
    box.scriptFile,
    box.launchFile,
    box.logFile,
    box.metricsFile,
    box.metricsProgress,
    box.pidFile,
    box.stopFile,
    box.exitFile,
    box.resultFile,
    markerOf(box),
  ])
    unlinkIfThere(file);
  for (const dir of [box.workDir, box.outputDir, box.metricsDir, box.runDir, box.root]) {
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
  /** The account it runs as, when not the worker's. */
  user?: JobUser;
}

/**
 * Records which attempt is about to run in a sandbox, so that a restarted worker can take it
 * over; the process records its own group id beside it as it starts. Readable by the worker's
 * user only: the dispatch carries the job's environment.
 */
export function markSandbox(
  box: Sandbox,
  msg: RunAttempt,
  startedAt: number,
  user?: JobUser,
): void {
  writeFileSync(markerOf(box), JSON.stringify({ msg, startedAt, ...(user && { user }) }), {
    mode: 0o600,
  });
}

/** Kills an attempt's whole process group, if it still runs; never a pid of 1 or less. */
export function killGroup(pid: number | null): boolean {
  if (!pid || pid <= 1) return false;
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
      found.push({
        box,
        marker: {
          msg: marker.msg,
          pid,
          startedAt: marker.startedAt,
          ...(marker.user && { user: marker.user }),
        },
      });
      continue;
    }
    killGroup(pid);
    await rm(box.root, { recursive: true, force: true });
  }
  return found;
}

/** A marker as written, or what is left of one written by another version: its pid, at least. */
function parseMarker(text: string): {
  msg: RunAttempt | null;
  pid: number | null;
  startedAt: number;
  user?: JobUser;
} | null {
  try {
    const raw = JSON.parse(text) as {
      msg?: unknown;
      pid?: unknown;
      startedAt?: unknown;
      user?: { uid?: unknown; gid?: unknown };
    };
    const msg = RunAttemptSchema.safeParse(raw.msg);
    const user =
      Number.isInteger(raw.user?.uid) && Number.isInteger(raw.user?.gid)
        ? { uid: raw.user!.uid as number, gid: raw.user!.gid as number }
        : undefined;
    return {
      msg: msg.success ? msg.data : null,
      pid: typeof raw.pid === 'number' && raw.pid > 1 ? raw.pid : null,
      startedAt: typeof raw.startedAt === 'number' ? raw.startedAt : Date.now(),
      ...(user && { user }),
    };
  } catch {
    return null;
  }
}
