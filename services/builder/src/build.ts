import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { failure } from '@trainyard/domain';
import type { BlobRef, CodeArchive, Failure, JobSpec } from '@trainyard/events';
import {
  ArchiveError,
  BlobKeys,
  fetchVerified,
  packDirectory,
  putFile,
  streamToFile,
  unpackArchive,
  type ArchiveLimits,
  type BlobStore,
} from '@trainyard/blobs';
import { LogShipper } from '@trainyard/runtime';
import { type Bus } from '@trainyard/service-kit';

export type BuildOutcome = { ok: true; artifact: BlobRef } | { ok: false; failure: Failure };

/**
 * Turns a job's code into an artifact for the process runtime: unpack it, checking it whole
 * first, and pack the result. A bad archive comes back as a user failure. `setup` is not run
 * here, in the control plane: the worker runs it in the attempt's sandbox, as its user.
 */
export async function buildArtifact(
  bus: Bus,
  blobs: BlobStore,
  jobId: string,
  spec: JobSpec,
  code: CodeArchive | null,
  limits: ArchiveLimits,
): Promise<BuildOutcome> {
  const dir = await mkdtemp(join(tmpdir(), 'trainyard-build-'));
  const shipper = new LogShipper(bus.js, jobId, 0, join(dir, 'build.log'));
  const src = join(dir, 'src');
  try {
    if (code) {
      const archive = join(dir, `code.${code.format}`);
      const fetched = await fetchVerified(blobs, code, archive);
      if (fetched !== 'fetched') {
        return {
          ok: false,
          failure: failure(
            'buildInfrastructure',
            fetched === 'missing'
              ? `code blob ${code.key} is missing`
              : `code blob ${code.key} is not the one uploaded (its size or sha256 differs)`,
          ),
        };
      }
      await unpackArchive(archive, code.format, src, limits);
      shipper.write(Buffer.from(`[trainyard] unpacked ${code.sizeBytes} bytes of code\n`));
    } else {
      await mkdir(src, { recursive: true });
    }
    if (spec.setup)
      shipper.write(Buffer.from('[trainyard] setup runs on the worker, before the command\n'));
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
