/** What an image build is given, the base image it starts from, and how a build fails. */
import type Docker from 'dockerode';
import { failure, refusedBase } from '@trainyard/domain';
import type { Failure } from '@trainyard/events';
import { clip } from './dockerfile.ts';
import { engineUnreachable, errorOf, messageOf, readProgress } from './progress.ts';

export interface ImageBuildConfig {
  docker: Docker;
  /** Registry images are pushed to, as image references name it, e.g. '127.0.0.1:5000'. */
  registry: string;
  /** Registry credentials; never logged, never in build output or errors. */
  auth?: { username: string; password: string };
  /**
   * pip settings from config (TRAINYARD_PIP_INDEX_URL, TRAINYARD_PIP_FIND_LINKS). findLinks is a
   * local directory on the builder host (copied into the build) or a URL.
   */
  pipIndexUrl?: string;
  pipFindLinks?: string;
  /**
   * Network for RUN steps: 'none' (default) or 'host' (needed when pipIndexUrl is an http URL on
   * this host).
   */
  network?: string;
  /** The memory a build's steps may use, in bytes (and no swap beyond it). */
  memoryBytes?: number;
  /** How long a build may take; past it, it fails as the job's (a setup that never ends). */
  timeoutMs?: number;
}

export interface ImageBuildInput {
  /**
   * What the image is tagged with in the repository: the id of the job (or session) it is built
   * for. Letters, digits, dashes and underscores: safe as a tag.
   */
  tag: string;
  /** A validated, resolved reference: `trainyard/python:3`, `host:5000/x/y:tag`, `x@sha256:…`. */
  baseImage: string;
  /**
   * The base is Trainyard's default, made on this engine: it is taken as the engine holds it.
   * Any other base is pulled from its registry and pinned by digest, never looked up among the
   * engine's images, which hold other jobs' images.
   */
  localBase?: boolean;
  /** The job's unpacked code; `requirements.txt` at its root is installed. */
  srcDir: string;
  /** A shell command run once at build time, in /workspace. */
  setup?: string;
  /** The sha256 of the code archive (null: no code), part of the cache key. */
  codeSha256: string | null;
}

/**
 * The repository in `registry` that every job's (and session's) image is pushed to, tagged with
 * its id.
 */
export function jobRepository(registry: string): string {
  return `${registry}/trainyard/jobs`;
}

/** Ends a build with a classified failure. */
export class ImageBuildFailed extends Error {
  override readonly name = 'ImageBuildFailed';
  constructor(readonly failure: Failure) {
    super(failure.message);
  }
}

/** The engine's id for an image, or null when it does not hold it. */
export async function imageId(docker: Docker, ref: string): Promise<string | null> {
  try {
    return ((await docker.getImage(ref).inspect()) as { Id: string }).Id;
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) return null;
    throw err;
  }
}

/**
 * The base image's id and the reference that pins it. The default base is the engine's own; any
 * other is pulled (by the builder's login only from Trainyard's registry, which it is never in)
 * and pinned by the digest its registry gave, so that no job builds on an image the engine holds
 * for another. A base that cannot be pulled, or one with ONBUILD steps (which would run as root
 * in the build), is the job's fault; an engine that cannot be reached is the platform's.
 */
export async function ensureBase(
  cfg: ImageBuildConfig,
  input: ImageBuildInput,
  say: (line: string) => void,
  signal?: AbortSignal,
): Promise<{ id: string; pinned: string }> {
  const ref = input.baseImage;
  if (input.localBase) {
    const id = await imageId(cfg.docker, ref);
    if (!id)
      throw new ImageBuildFailed(
        failure('buildInfrastructure', `the default base image ${ref} is missing`),
      );
    return { id, pinned: ref };
  }
  const forbidden = refusedBase(ref, cfg.registry);
  if (forbidden)
    throw new ImageBuildFailed(failure('buildFailed', `the base image may not be ${forbidden}`));
  say(`[trainyard] pulling the base image ${ref}`);
  let error: string | undefined;
  try {
    const stream = await cfg.docker.pull(ref, { abortSignal: signal });
    await readProgress(stream, (e) => {
      error ??= errorOf(e);
      if (e.status && !e.id) say(e.status);
    });
  } catch (err) {
    if (engineUnreachable(err) || signal?.aborted) throw err;
    error = messageOf(err);
  }
  if (error) {
    // A registry that is busy or failing may answer later; any other refusal (no such image,
    // no access, a registry this cluster cannot reach) is the job's to mend.
    const passing = /toomanyrequests|\b(429|5\d\d)\b|timeout|connection reset|no space left/i.test(
      error,
    );
    throw new ImageBuildFailed(
      failure(
        passing ? 'buildInfrastructure' : 'buildFailed',
        clip(`the base image ${ref} could not be pulled: ${error}`),
      ),
    );
  }
  const info = (await cfg.docker.getImage(ref).inspect()) as {
    Id: string;
    RepoDigests?: string[];
    Config?: { OnBuild?: string[] | null };
  };
  if (info.Config?.OnBuild?.length) {
    throw new ImageBuildFailed(
      failure('buildFailed', `the base image ${ref} has ONBUILD steps, which are not taken`),
    );
  }
  const repo = ref
    .replace(/@sha256:[a-f0-9]{64}$/, '')
    .replace(/:[A-Za-z0-9_][A-Za-z0-9_.-]*$/, '');
  const named = info.RepoDigests?.find((d) => d.startsWith(`${repo}@`)) ?? info.RepoDigests?.[0];
  return { id: info.Id, pinned: named ?? info.Id };
}

export function authConfig(cfg: ImageBuildConfig): Docker.AuthConfig {
  return cfg.auth
    ? { username: cfg.auth.username, password: cfg.auth.password, serveraddress: cfg.registry }
    : {};
}
