import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { failure } from '@trainyard/domain';
import type { BlobRef, CodeArchive, Failure, JobSpec } from '@trainyard/events';
import {
  ArchiveError,
  attemptEnv,
  BlobKeys,
  LogShipper,
  packDirectory,
  putFile,
  streamToFile,
  unpackArchive,
  type ArchiveLimits,
  type BlobStore,
  type Bus,
} from '@trainyard/platform';

export type BuildOutcome = { ok: true; artifact: BlobRef } | { ok: false; failure: Failure };

/**
 * Runs the setup command and ends its whole process group when the builder goes away: a watcher
 * reads the builder's end of a pipe, which closes only when the builder dies. The command's
 * exit code is the wrapper's.
 */
const SETUP_WRAPPER =
  'exec 3<&0; (read -r _ <&3; kill -KILL 0) & __ty_watch=$!; (eval "$1") </dev/null 3<&-; __ty_code=$?; kill "$__ty_watch" 2>/dev/null; exit "$__ty_code"';

/** Runs the setup command in the unpacked tree, its output going to the build log. */
function runSetup(
  setup: string,
  dir: string,
  jobId: string,
  env: Record<string, string>,
  timeoutMs: number,
  shipper: LogShipper,
) {
  return new Promise<Failure | null>((resolve) => {
    const child = spawn('/bin/sh', ['-c', SETUP_WRAPPER, 'trainyard-setup', setup], {
      cwd: dir,
      env: attemptEnv({
        jobId,
        attempt: 0,
        env,
        workDir: dir,
        outputDir: dir,
        gpus: [],
      }),
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const timer = setTimeout(() => child.pid && process.kill(-child.pid, 'SIGKILL'), timeoutMs);
    child.stdout.on('data', (c: Buffer) => shipper.write(c));
    child.stderr.on('data', (c: Buffer) => shipper.write(c));
    child.once('error', (err) =>
      resolve(failure('buildInfrastructure', `setup could not start: ${err.message}`)),
    );
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(null);
      else
        resolve(
          failure(
            'setupFailed',
            signal ? `setup was killed by ${signal}` : `setup exited with code ${code}`,
          ),
        );
    });
  });
}

/**
 * Turns a job's code into an artifact for the process runtime: unpack safely, run `setup`,
 * pack the result. User mistakes (a bad archive, a failing setup) come back as user failures.
 */
export async function buildArtifact(
  bus: Bus,
  blobs: BlobStore,
  jobId: string,
  spec: JobSpec,
  code: CodeArchive | null,
  setupTimeoutMs: number,
  limits: ArchiveLimits,
): Promise<BuildOutcome> {
  const dir = await mkdtemp(join(tmpdir(), 'trainyard-build-'));
  const shipper = new LogShipper(bus.js, jobId, 0, join(dir, 'build.log'));
  const src = join(dir, 'src');
  try {
    if (code) {
      const blob = await blobs.get(code.key);
      if (!blob)
        return {
          ok: false,
          failure: failure('buildInfrastructure', `code blob ${code.key} is missing`),
        };
      const archive = join(dir, `code.${code.format}`);
      await streamToFile(blob, archive);
      await unpackArchive(archive, code.format, src, limits);
      shipper.write(Buffer.from(`[trainyard] unpacked ${code.sizeBytes} bytes of code\n`));
    } else {
      await mkdir(src, { recursive: true });
    }
    if (spec.setup) {
      shipper.write(Buffer.from(`[trainyard] running setup: ${spec.setup}\n`));
      const setupFailure = await runSetup(
        spec.setup,
        src,
        jobId,
        spec.env,
        setupTimeoutMs,
        shipper,
      );
      if (setupFailure) return { ok: false, failure: setupFailure };
    }
    const packed = join(dir, 'artifact.tar.gz');
    await streamToFile(packDirectory(src), packed);
    const artifact = await putFile(blobs, BlobKeys.artifact(jobId), packed);
    shipper.write(Buffer.from(`[trainyard] artifact ready (${artifact.sizeBytes} bytes)\n`));
    return { ok: true, artifact };
  } catch (err) {
    if (err instanceof ArchiveError)
      return { ok: false, failure: failure('badArchive', err.message) };
    return { ok: false, failure: failure('buildInfrastructure', (err as Error).message) };
  } finally {
    await shipper.end();
    await shipper.archive(blobs).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }
}
