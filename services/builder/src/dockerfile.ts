import { createHash } from 'node:crypto';
import { failure } from '@trainyard/domain';
import type { Failure } from '@trainyard/events';

/**
 * Where the build context holds what goes into a job's image. The job's code sits under `code/`,
 * so no name it brings can reach the Dockerfile or what Trainyard adds beside it.
 */
export const ContextPaths = {
  code: 'code',
  extras: '.trainyard',
  build: '.trainyard/build',
  wheels: '.trainyard/build/wheels',
  setup: '.trainyard/build/setup.sh',
} as const;

/** Where `.trainyard/wheels` lands in the image, for pip's find-links; gone once pip has run. */
export const IMAGE_WHEELS_DIR = '/trainyard/build/wheels';

/**
 * The uid a job's build steps run as: no step that runs what a job brought (its requirements'
 * own build scripts, its `setup`) runs as root.
 */
export const BUILD_UID = 65534;

/** Where the job's requirements are installed (pip's user scheme), which Python finds by itself. */
export const PYTHON_USER_BASE = '/trainyard/python';

/** The shell that installs `requirements.txt`, when the code has one. */
export const REQUIREMENTS_RUN =
  'if [ -f requirements.txt ]; then python3 -m pip install --user --no-cache-dir --disable-pip-version-check -r requirements.txt; fi';
/** The shell that runs the job's `setup`, when it has one. */
export const SETUP_RUN =
  'if [ -f /trainyard/build/setup.sh ]; then env -u PIP_INDEX_URL -u PIP_FIND_LINKS -u PIP_NO_INDEX sh /trainyard/build/setup.sh; fi';

/**
 * Constant text: the base image, pip's settings and the labels arrive as build args, the code and
 * `setup` as files, so nothing a job writes can become an instruction. Steps are few because the
 * classic builder runs a container for each; the label args come last so that the steps before
 * them stay in the engine's layer cache from one job to the next.
 */
const DOCKERFILE = [
  'ARG BASE',
  'FROM ${BASE}',
  'ARG PIP_INDEX_URL PIP_FIND_LINKS PIP_NO_INDEX',
  `COPY --chown=${BUILD_UID}:${BUILD_UID} ${ContextPaths.code}/ /workspace/`,
  `COPY --chown=${BUILD_UID}:${BUILD_UID} ${ContextPaths.extras}/ /trainyard/`,
  // No step runs as root: the copies make /workspace and /trainyard the build's uid's (a base
  // that holds /workspace already keeps it root's, and only what is in it is the build's).
  `USER ${BUILD_UID}:${BUILD_UID}`,
  `ENV HOME=/workspace PYTHONUSERBASE=${PYTHON_USER_BASE}`,
  'WORKDIR /workspace',
  `RUN ${REQUIREMENTS_RUN}`,
  // Jobs run as a uid of their own, which must be able to write beside their code.
  `RUN ${SETUP_RUN} && rm -rf /trainyard/build && { chmod -R a+rwX /workspace 2>/dev/null || true; }`,
  'ARG TRAINYARD_CACHE_KEY TRAINYARD_JOB',
  'LABEL trainyard.build=1 trainyard.cache-key=${TRAINYARD_CACHE_KEY} trainyard.job=${TRAINYARD_JOB}',
  '',
].join('\n');

/** The Dockerfile every job's image is built from. */
export function dockerfileText(): string {
  return DOCKERFILE;
}

/** pip's settings, as the builder's configuration gives them. */
export interface PipSettings {
  indexUrl?: string;
  /** A directory on the builder's host, or a URL. */
  findLinks?: string;
  /** The network RUN steps have: 'none' or 'host'. */
  network: string;
}

/** Whether a find-links setting names a URL rather than a directory on this host. */
export function isUrl(location: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(location);
}

/**
 * The build args for a base image and pip's settings. A local find-links directory is copied
 * into the context, so pip is pointed at its copy in the image. With no index given and no
 * network to reach one, pip is told there is none: it then says at once which requirement it
 * cannot find, instead of retrying a connection that cannot succeed.
 */
export function buildArgs(baseImage: string, pip: PipSettings): Record<string, string> {
  const args: Record<string, string> = { BASE: baseImage };
  if (pip.indexUrl) args.PIP_INDEX_URL = pip.indexUrl;
  if (pip.findLinks) {
    args.PIP_FIND_LINKS = isUrl(pip.findLinks) ? pip.findLinks : IMAGE_WHEELS_DIR;
  }
  if (!pip.indexUrl && (pip.findLinks || pip.network === 'none')) args.PIP_NO_INDEX = '1';
  return args;
}

/** Everything an image is made from; equal inputs make an equal image. */
export interface CacheInputs {
  baseImage: string;
  /** The engine's id for the base image: a tag moved to a new image makes a new key. */
  baseImageId: string | null;
  codeSha256: string | null;
  setup: string | null;
  buildArgs: Record<string, string>;
  /** What the find-links directory holds (names, sizes, times), when it is one on this host. */
  wheels: string | null;
}

/** The cache key of an image: sha256 over the Dockerfile and everything the build reads. */
export function cacheKey(inputs: CacheInputs): string {
  const args = Object.keys(inputs.buildArgs)
    .sort()
    .map((name) => [name, inputs.buildArgs[name]]);
  const parts = [
    DOCKERFILE,
    inputs.baseImage,
    inputs.baseImageId,
    inputs.codeSha256,
    inputs.setup,
    args,
    inputs.wheels,
  ];
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex');
}

/** The most of a failure message; output quoted in it is cut to fit. */
const MAX_MESSAGE = 990;
const QUOTED_LINES = 5;

/** Cuts `text` to `max` characters, marking the cut. */
export function clip(text: string, max = MAX_MESSAGE): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** What a failed build said: the step that failed, its last lines of output, the engine's error. */
export interface BuildError {
  /** The failing step's instruction, as the build printed it (`RUN …`). */
  step: string;
  /** The step's output, oldest first. */
  output: string[];
  error: string;
}

const MISSING_IMAGE = /pull access denied|not found|manifest unknown|no such image/i;

/** The last few non-empty lines of output, joined for a message. */
function tail(lines: string[], count = QUOTED_LINES): string {
  return lines
    .filter((l) => l.trim())
    .slice(-count)
    .map((l) => clip(l.trim(), 200))
    .join(' | ');
}

/**
 * Classifies a failed build. A RUN step that exits non-zero, or a base image the engine cannot
 * find, is the job's fault and named in the message with the output that shows why; anything
 * else the engine reports (a full disk, a lost daemon) is the platform's, and worth a retry.
 */
export function classifyBuildError(err: BuildError): Failure {
  const exit = /returned a non-zero code: (\d+)/.exec(err.error);
  if (exit && err.step.includes(REQUIREMENTS_RUN)) {
    const missing = err.output.find((l) => /No matching distribution found for /.test(l));
    const errors = err.output.filter((l) => l.startsWith('ERROR:'));
    const why = missing?.trim() ?? (errors.length ? tail(errors, 3) : tail(err.output));
    return failure('buildFailed', clip(`requirements.txt could not be installed: ${why}`));
  }
  if (exit && err.step.includes(SETUP_RUN)) {
    const said = tail(err.output);
    return failure(
      'buildFailed',
      clip(`setup exited with code ${exit[1]}${said ? `: ${said}` : ''}`),
    );
  }
  if (exit || MISSING_IMAGE.test(err.error)) {
    const said = tail(err.output);
    return failure('buildFailed', clip(`${said ? `${said} | ` : ''}${err.error}`));
  }
  return failure('buildInfrastructure', clip(`the image build failed: ${err.error}`));
}
