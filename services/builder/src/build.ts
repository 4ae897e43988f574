import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { failure } from '@trainyard/domain';
import type { BlobRef, BuiltImage, CodeArchive, Failure, JobSpec } from '@trainyard/events';
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
import {
  BaseUnavailable,
  ensureLocalBaseImage,
  localBaseOf,
  LogShipper,
  resolveBaseImage,
} from '@trainyard/runtime';
import { type Bus } from '@trainyard/service-kit';
import { buildImage, type ImageBuildConfig } from './image.ts';

export type BuildOutcome =
  { ok: true; artifact: BlobRef; image?: BuiltImage } | { ok: false; failure: Failure };

/**
 * Turns a job's code into what its workers run: unpack it, checking it whole first, and pack
 * the result as an artifact; for a job that names an image, build that image too, on `images`'
 * engine, and push it. A bad archive, or an image that cannot be built from what the job
 * brought, comes back as a user failure. A job on the host has its `setup` run by the worker, in
 * the attempt's sandbox, as its user; a job in a container has it run in its image's build.
 */
export async function buildJob(
  bus: Bus,
  blobs: BlobStore,
  jobId: string,
  spec: JobSpec,
  code: CodeArchive | null,
  limits: ArchiveLimits,
  images: ImageBuildConfig | null,
  signal?: AbortSignal,
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
    const say = (line: string) => shipper.write(Buffer.from(`${line}\n`));
    if (spec.setup && !spec.image) say('[trainyard] setup runs on the worker, before the command');
    const packed = join(dir, 'artifact.tar.gz');
    await streamToFile(packDirectory(src), packed);
    const artifact = await putFile(blobs, BlobKeys.artifact(jobId), packed);
    say(`[trainyard] artifact ready (${artifact.sizeBytes} bytes)`);
    if (spec.image === undefined) return { ok: true, artifact };
    if (!images) {
      return {
        ok: false,
        failure: failure(
          'buildInfrastructure',
          'this builder has no Docker engine and registry (TRAINYARD_DOCKER_HOST, TRAINYARD_REGISTRY) to build the job’s image',
        ),
      };
    }
    const local = localBaseOf(spec.image);
    if (local) {
      say(`[trainyard] checking the local base image ${local.ref}`);
      const made = await ensureLocalBaseImage(images.docker, local).catch((err: unknown) => {
        if (!(err instanceof BaseUnavailable)) throw err;
        return failure('buildFailed', err.message);
      });
      if (typeof made === 'object') return { ok: false, failure: made };
      if (made) say(`[trainyard] made the base image ${local.ref} from this host’s Python`);
    }
    say(`[trainyard] building the job’s image on ${resolveBaseImage(spec.image)}`);
    const deadline = AbortSignal.timeout(images.timeoutMs ?? 3_600_000);
    const built = await buildImage(
      images,
      {
        jobId,
        baseImage: resolveBaseImage(spec.image),
        localBase: local !== undefined,
        srcDir: src,
        ...(spec.setup && { setup: spec.setup }),
        codeSha256: code?.sha256 ?? null,
      },
      say,
      signal ? AbortSignal.any([signal, deadline]) : deadline,
    ).catch((err: unknown) => {
      if (!deadline.aborted || signal?.aborted) throw err;
      const minutes = Math.round((images.timeoutMs ?? 3_600_000) / 60_000);
      return {
        ok: false as const,
        failure: failure('buildFailed', `the image build ran past its ${minutes}-minute limit`),
      };
    });
    if (!built.ok) return built;
    say(`[trainyard] image ${built.image.ref}${built.cached ? ' (from the cache)' : ''}`);
    return { ok: true, artifact, image: built.image };
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
