import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type Docker from 'dockerode';
import { failure } from '@trainyard/domain';
import type { Failure } from '@trainyard/events';
import {
  buildArgs,
  cacheKey,
  classifyBuildError,
  clip,
  ContextPaths,
  dockerfileText,
  isUrl,
} from './dockerfile.ts';
import {
  engineUnreachable,
  errorOf,
  lineSplitter,
  messageOf,
  readProgress,
  redactor,
} from './progress.ts';

import {
  authConfig,
  ensureBase,
  ImageBuildFailed,
  imageId,
  jobRepository,
  type ImageBuildConfig,
  type ImageBuildInput,
} from './base.ts';

export { jobRepository, type ImageBuildConfig, type ImageBuildInput } from './base.ts';

const run = promisify(execFile);

export type ImageBuildOutcome =
  | { ok: true; image: { ref: string; digest: string }; cached: boolean }
  | { ok: false; failure: Failure };

/** The local repository whose tags name images built before, by the key of their inputs. */
const CACHE_REPOSITORY = 'trainyard/cache';

/** A fingerprint of a find-links directory: its files' names, sizes and times. */
async function wheelsFingerprint(dir: string): Promise<string> {
  const entries = await readdir(dir).catch(() => {
    throw new ImageBuildFailed(
      failure('buildInfrastructure', `the pip find-links directory ${dir} cannot be read`),
    );
  });
  const lines = await Promise.all(
    entries.sort().map(async (name) => {
      const s = await stat(join(dir, name));
      return `${name}\t${s.size}\t${s.mtimeMs}`;
    }),
  );
  return lines.join('\n');
}

/** Copies a tree as it is (links as links), hard-linking files where the filesystem allows. */
async function copyTree(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true });
  try {
    await run('cp', ['-al', '--', `${from}/.`, to]);
  } catch {
    await rm(to, { recursive: true, force: true });
    await mkdir(to, { recursive: true });
    await run('cp', ['-a', '--', `${from}/.`, to]);
  }
}

/** Lays out the build context in `ctx`: the Dockerfile, the code, and what Trainyard adds. */
async function writeContext(
  ctx: string,
  input: ImageBuildInput,
  wheelsDir: string | null,
): Promise<void> {
  await writeFile(join(ctx, 'Dockerfile'), dockerfileText());
  await mkdir(join(ctx, ContextPaths.build), { recursive: true });
  if (input.setup) await writeFile(join(ctx, ContextPaths.setup), input.setup);
  if (wheelsDir) await copyTree(wheelsDir, join(ctx, ContextPaths.wheels));
  const hasCode = await stat(input.srcDir).then(
    (s) => s.isDirectory(),
    () => false,
  );
  if (hasCode) await copyTree(input.srcDir, join(ctx, ContextPaths.code));
  else await mkdir(join(ctx, ContextPaths.code));
}

interface BuildPlan {
  key: string;
  args: Record<string, string>;
  wheelsDir: string | null;
}

/** Builds the image with the classic builder, streaming its output; resolves to the image's id. */
async function buildFresh(
  cfg: ImageBuildConfig,
  input: ImageBuildInput,
  plan: BuildPlan,
  say: (line: string) => void,
  signal?: AbortSignal,
): Promise<string> {
  const ctx = await mkdtemp(join(tmpdir(), 'trainyard-image-'));
  try {
    await writeContext(ctx, input, plan.wheelsDir);
    return await sendContext(cfg, input, plan, ctx, say, signal);
  } finally {
    await rm(ctx, { recursive: true, force: true });
  }
}

async function sendContext(
  cfg: ImageBuildConfig,
  input: ImageBuildInput,
  plan: BuildPlan,
  ctx: string,
  say: (line: string) => void,
  signal?: AbortSignal,
): Promise<string> {
  const tar = spawn('tar', ['-C', ctx, '-c', '-f', '-', '.'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let tarErr = '';
  tar.stderr.on('data', (chunk: Buffer) => (tarErr += chunk.toString()));
  const tarDone = new Promise<number | null>((resolve) => {
    tar.once('close', resolve);
    tar.once('error', (err) => {
      tarErr += err.message;
      resolve(-1);
    });
  });
  const tag = `${jobRepository(cfg.registry)}:${input.tag}`;
  let step = '';
  let output: string[] = [];
  let error: string | undefined;
  let id: string | undefined;
  let sent = false;
  const lines = lineSplitter((line) => {
    say(line);
    if (/^Step \d+\/\d+ : /.test(line)) {
      step = line;
      output = [];
    } else if (!/^ ---> |^Removing intermediate container /.test(line)) {
      output = [...output.slice(-49), line];
    }
  });
  try {
    const stream = await cfg.docker.buildImage(tar.stdout, {
      t: tag,
      buildargs: { ...plan.args, TRAINYARD_CACHE_KEY: plan.key, TRAINYARD_JOB: input.tag },
      networkmode: cfg.network ?? 'none',
      ...(cfg.memoryBytes && { memory: cfg.memoryBytes, memswap: cfg.memoryBytes }),
      rm: true,
      forcerm: true,
      abortSignal: signal,
    });
    await readProgress(stream, (e) => {
      if (e.stream) lines.push(e.stream);
      if (e.aux?.ID) id = e.aux.ID;
      error ??= errorOf(e);
    });
    lines.flush();
    sent = true;
  } finally {
    if (!sent) tar.kill();
  }
  if (error) {
    tar.kill();
    throw new ImageBuildFailed(classifyBuildError({ step, output, error }));
  }
  const code = await tarDone;
  if (code !== 0) throw new Error(`tar could not pack the build context: ${tarErr.trim()}`);
  id ??= (await imageId(cfg.docker, tag)) ?? undefined;
  if (!id) throw new Error('the build finished without an image');
  return id;
}

/**
 * The image built before from the inputs `key` names, or null. It is found by a tag only the
 * builder gives (a label could come with a pulled base image, and no base may be named in
 * Trainyard's namespace).
 */
async function findCached(docker: Docker, key: string): Promise<string | null> {
  return imageId(docker, `${CACHE_REPOSITORY}:${key}`);
}

/**
 * Pushes the job's tag and resolves to the digest the registry stored it under. Every push error
 * is the platform's: the registry is Trainyard's, not the job's.
 */
async function push(
  cfg: ImageBuildConfig,
  tag: string,
  say: (line: string) => void,
  signal?: AbortSignal,
): Promise<string> {
  const repo = jobRepository(cfg.registry);
  say(`[trainyard] pushing ${repo}:${tag}`);
  let digest: string | undefined;
  let error: string | undefined;
  try {
    // The engine wants an X-Registry-Auth header even for a registry without accounts.
    const stream = await cfg.docker
      .getImage(repo)
      .push({ tag, authconfig: authConfig(cfg), abortSignal: signal });
    await readProgress(stream, (e) => {
      if (e.aux?.Digest) digest = e.aux.Digest;
      error ??= errorOf(e);
    });
  } catch (err) {
    if (engineUnreachable(err) || signal?.aborted) throw err;
    error = messageOf(err);
  }
  if (error) {
    throw new ImageBuildFailed(
      failure(
        'buildInfrastructure',
        clip(`pushing to the registry ${cfg.registry} failed: ${error}`),
      ),
    );
  }
  if (!digest) {
    const info = (await cfg.docker.getImage(`${repo}:${tag}`).inspect()) as {
      RepoDigests?: string[];
    };
    digest = info.RepoDigests?.find((d) => d.startsWith(`${repo}@`))?.slice(repo.length + 1);
  }
  if (!digest) throw new Error(`the registry ${cfg.registry} gave no digest for ${repo}:${tag}`);
  say(`[trainyard] pushed ${repo}@${digest}`);
  return digest;
}

/**
 * Builds a job's image from its code, `requirements.txt` and `setup` on its base image, tags it
 * `<registry>/trainyard/jobs:<tag>` and pushes it; the result names it by digest. An image
 * built before from the same inputs is reused. Output lines reach `out` as the engine sends them.
 * Rejects only when `signal` aborts; every other failure comes back classified.
 */
export async function buildImage(
  cfg: ImageBuildConfig,
  input: ImageBuildInput,
  out: (line: string) => void,
  signal?: AbortSignal,
): Promise<ImageBuildOutcome> {
  const redact = redactor(cfg.auth?.password);
  const say = (line: string) => out(redact(line));
  try {
    signal?.throwIfAborted();
    const base = await ensureBase(cfg, input, say, signal);
    const localWheels = cfg.pipFindLinks && !isUrl(cfg.pipFindLinks) ? cfg.pipFindLinks : null;
    const args = buildArgs(base.pinned, {
      indexUrl: cfg.pipIndexUrl,
      findLinks: cfg.pipFindLinks,
      network: cfg.network ?? 'none',
    });
    const key = cacheKey({
      baseImage: base.pinned,
      baseImageId: base.id,
      codeSha256: input.codeSha256,
      setup: input.setup ?? null,
      buildArgs: args,
      wheels: localWheels ? await wheelsFingerprint(localWheels) : null,
    });
    const cachedId = await findCached(cfg.docker, key);
    if (cachedId) {
      say(`[trainyard] reusing the image ${cachedId}, built before from the same inputs`);
      await cfg.docker
        .getImage(cachedId)
        .tag({ repo: jobRepository(cfg.registry), tag: input.tag, abortSignal: signal });
    } else {
      const id = await buildFresh(cfg, input, { key, args, wheelsDir: localWheels }, say, signal);
      await cfg.docker.getImage(id).tag({ repo: CACHE_REPOSITORY, tag: key, abortSignal: signal });
    }
    const digest = await push(cfg, input.tag, say, signal);
    const ref = `${jobRepository(cfg.registry)}@${digest}`;
    return { ok: true, image: { ref, digest }, cached: cachedId !== null };
  } catch (err) {
    if (signal?.aborted) throw signal.reason;
    if (err instanceof ImageBuildFailed) {
      return { ok: false, failure: { ...err.failure, message: redact(err.failure.message) } };
    }
    const message = engineUnreachable(err)
      ? `the Docker engine cannot be reached: ${messageOf(err)}`
      : `the image build failed: ${messageOf(err)}`;
    return { ok: false, failure: failure('buildInfrastructure', clip(redact(message))) };
  }
}
