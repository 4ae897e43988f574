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

/** What a build of an image alone comes to. */
export type ImageOutcome = { ok: true; image: BuiltImage } | { ok: false; failure: Failure };

type Refused = { ok: false; failure: Failure };

/** Says a line of a build's progress. */
type Say = (line: string) => void;

/**
 * Fetches `code` (checked against its size and sha256) and unpacks it into `src`, checking it
 * whole first; an empty `src` for none. A missing or altered blob is the platform's failure.
 */
async function unpackCode(
  blobs: BlobStore,
  code: CodeArchive | null,
  dir: string,
  src: string,
  limits: ArchiveLimits,
  say: Say,
): Promise<Refused | null> {
  if (!code) {
    await mkdir(src, { recursive: true });
    return null;
  }
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
  say(`[trainyard] unpacked ${code.sizeBytes} bytes of code`);
  return null;
}

/** What an image is built from: its base, the unpacked code, a setup step, its tag. */
interface ImageRecipe {
  /** What the image is for, in the build's progress. */
  what: 'job' | 'session';
  tag: string;
  /** The base as the spec names it (`python`, `pytorch/pytorch:2.3.0`, ...). */
  base: string;
  src: string;
  setup?: string;
  codeSha256: string | null;
}

/**
 * Builds an image from `recipe` on `images`' engine and pushes it: a local base (Trainyard's
 * own) is made first where the engine has none. A base that cannot be made, or an image that
 * cannot be built from what the user brought, is the user's failure.
 */
async function imageFrom(
  images: ImageBuildConfig | null,
  recipe: ImageRecipe,
  say: Say,
  signal?: AbortSignal,
): Promise<ImageOutcome> {
  if (!images) {
    return {
      ok: false,
      failure: failure(
        'buildInfrastructure',
        'this builder has no Docker engine and registry (TRAINYARD_DOCKER_HOST, TRAINYARD_REGISTRY) to build images',
      ),
    };
  }
  const local = localBaseOf(recipe.base);
  if (local) {
    say(`[trainyard] checking the local base image ${local.ref}`);
    const made = await ensureLocalBaseImage(images.docker, local).catch((err: unknown) => {
      if (!(err instanceof BaseUnavailable)) throw err;
      return failure('buildFailed', err.message);
    });
    if (typeof made === 'object') return { ok: false, failure: made };
    if (made) say(`[trainyard] made the base image ${local.ref} from this host’s Python`);
  }
  const baseImage = resolveBaseImage(recipe.base);
  say(`[trainyard] building the ${recipe.what}’s image on ${baseImage}`);
  const limitMs = images.timeoutMs ?? 3_600_000;
  const deadline = AbortSignal.timeout(limitMs);
  const built = await buildImage(
    images,
    {
      tag: recipe.tag,
      baseImage,
      localBase: local !== undefined,
      srcDir: recipe.src,
      ...(recipe.setup && { setup: recipe.setup }),
      codeSha256: recipe.codeSha256,
    },
    say,
    signal ? AbortSignal.any([signal, deadline]) : deadline,
  ).catch((err: unknown) => {
    if (!deadline.aborted || signal?.aborted) throw err;
    const minutes = Math.round(limitMs / 60_000);
    return {
      ok: false as const,
      failure: failure('buildFailed', `the image build ran past its ${minutes}-minute limit`),
    };
  });
  if (!built.ok) return built;
  say(`[trainyard] image ${built.image.ref}${built.cached ? ' (from the cache)' : ''}`);
  return { ok: true, image: built.image };
}

/** What a build that threw comes to: a bad archive is the user's, anything else the platform's. */
function thrown(err: unknown): Refused {
  if (err instanceof ArchiveError)
    return { ok: false, failure: failure('badArchive', err.message) };
  return { ok: false, failure: failure('buildInfrastructure', (err as Error).message) };
}

/**
 * Runs a build in a directory of its own, removed after; what it says is `id`'s build log
 * (attempt 0), live and archived at the end. A build that throws comes back as `thrown` says.
 */
async function inBuildDir<T>(
  bus: Bus,
  blobs: BlobStore,
  id: string,
  build: (dir: string, say: Say) => Promise<T>,
): Promise<T | Refused> {
  const dir = await mkdtemp(join(tmpdir(), 'trainyard-build-'));
  const shipper = new LogShipper(bus.js, id, 0, join(dir, 'build.log'));
  const say = (line: string) => shipper.write(Buffer.from(`${line}\n`));
  try {
    return await build(dir, say);
  } catch (err) {
    return thrown(err);
  } finally {
    await shipper.end();
    await shipper.archive(blobs).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }
}

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
  return inBuildDir(bus, blobs, jobId, async (dir, say): Promise<BuildOutcome> => {
    const src = join(dir, 'src');
    const refused = await unpackCode(blobs, code, dir, src, limits, say);
    if (refused) return refused;
    if (spec.setup && !spec.image) say('[trainyard] setup runs on the worker, before the command');
    const packed = join(dir, 'artifact.tar.gz');
    await streamToFile(packDirectory(src), packed);
    const artifact = await putFile(blobs, BlobKeys.artifact(jobId), packed);
    say(`[trainyard] artifact ready (${artifact.sizeBytes} bytes)`);
    if (spec.image === undefined) return { ok: true, artifact };
    const recipe: ImageRecipe = {
      what: 'job',
      tag: jobId,
      base: spec.image,
      src,
      ...(spec.setup && { setup: spec.setup }),
      codeSha256: code?.sha256 ?? null,
    };
    const built = await imageFrom(images, recipe, say, signal);
    return built.ok ? { ok: true, artifact, image: built.image } : built;
  });
}

/**
 * Builds a session's image: its code (and `requirements.txt`) on its base image, on `images`'
 * engine, pushed and named by digest, as a job's is. Its progress is the session's log.
 */
export async function buildSessionImage(
  bus: Bus,
  blobs: BlobStore,
  sessionId: string,
  base: string,
  code: CodeArchive | null,
  limits: ArchiveLimits,
  images: ImageBuildConfig | null,
  signal?: AbortSignal,
): Promise<ImageOutcome> {
  return inBuildDir(bus, blobs, sessionId, async (dir, say): Promise<ImageOutcome> => {
    const src = join(dir, 'src');
    const refused = await unpackCode(blobs, code, dir, src, limits, say);
    if (refused) return refused;
    const recipe: ImageRecipe = {
      what: 'session',
      tag: sessionId,
      base,
      src,
      codeSha256: code?.sha256 ?? null,
    };
    return imageFrom(images, recipe, say, signal);
  });
}
