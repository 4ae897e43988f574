import { execFile, spawn } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import type Docker from 'dockerode';

const run = promisify(execFile);
/** coreutils' `env`, copied into the local bases at the path it has on the host. */
const ENV = '/usr/bin/env';

/** The image a job runs on when it names the default base (`"image": "python"`). */
export const DEFAULT_BASE_IMAGE = 'trainyard/python:3';
/** What a job writes to name the default base. */
export const DEFAULT_BASE_ALIAS = 'python';

/**
 * The bases Trainyard makes itself, from this host, by the name a job gives them: `python`
 * (the interpreter, its standard library and pip) and `pytorch` (the same with every package
 * Debian installed for it: python3-torch, python3-sklearn and what they need).
 */
export const LOCAL_BASES = {
  [DEFAULT_BASE_ALIAS]: { ref: DEFAULT_BASE_IMAGE, hostPackages: false },
  pytorch: { ref: 'trainyard/pytorch:host', hostPackages: true },
} as const;
export type LocalBase = (typeof LOCAL_BASES)[keyof typeof LOCAL_BASES];

/** The local base a job's `image` names, if it names one. */
export function localBaseOf(image: string | undefined): LocalBase | undefined {
  return Object.entries(LOCAL_BASES).find(([alias]) => alias === image)?.[1];
}

/** The base image a job's `image` names: a local base's for its alias, else as written. */
export function resolveBaseImage(image: string | undefined): string {
  return image === undefined ? DEFAULT_BASE_IMAGE : (localBaseOf(image)?.ref ?? image);
}

/** The label that names the recipe a local base was made by: one made by an earlier is remade. */
export const BASE_RECIPE_LABEL = 'io.trainyard.base-recipe';
/** The recipe's version: 2 brought coreutils' `env` (see `DEFAULT_SIGNALS`). */
export const BASE_RECIPE = 2;

/** The engine's record of the image `ref` (its labels, here), or null when it holds none. */
async function inspected(
  docker: Docker,
  ref: string,
): Promise<{ Config?: { Labels?: Record<string, string> | null } } | null> {
  try {
    return (await docker.getImage(ref).inspect()) as {
      Config?: { Labels?: Record<string, string> | null };
    };
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) return null;
    throw err;
  }
}

/** Whether the engine holds the image `ref`. */
export async function hasImage(docker: Docker, ref: string): Promise<boolean> {
  return (await inspected(docker, ref)) !== null;
}

/** The shared libraries an executable or library loads, by their paths on this host. */
async function sharedLibraries(files: string[]): Promise<string[]> {
  const libs = new Set<string>();
  for (const file of files) {
    const { stdout } = await run('ldd', [file]).catch(() => ({ stdout: '' }));
    for (const match of stdout.matchAll(/(\/\S+)/g)) libs.add(match[1]!);
  }
  return [...libs];
}

/**
 * Copies host paths into `root` at the same paths (`-L`: what links name, not the links). It
 * runs from `/` with relative paths: bookworm's cp cannot keep the parents' modes otherwise.
 */
async function copyIn(root: string, paths: string[], follow = false): Promise<void> {
  const present = paths.filter((p) => existsSync(p)).map((p) => p.replace(/^\/+/, ''));
  if (!present.length) return;
  await run('cp', [follow ? '-aL' : '-a', '--parents', ...present, `${root}/`], { cwd: '/' });
}

/**
 * Makes the default base image from this host's Python (Debian's python3 and python3-pip), a static
 * busybox for the shell and the usual tools, and coreutils' `env` (busybox's cannot start a command
 * with the signals a shell ignored at their default): no registry is needed. The interpreter, its
 * standard library, pip and the shared libraries they load are copied into an empty root, which is
 * imported as `ref`. Its `root` and `nobody` accounts are the only ones; jobs run as a uid of their
 * own anyway.
 */
export async function makePythonBaseImage(
  docker: Docker,
  ref: string = DEFAULT_BASE_IMAGE,
  hostPackages = false,
): Promise<void> {
  const python = realpathSync('/usr/bin/python3');
  const version = basename(python);
  const stdlib = `/usr/lib/${version}`;
  if (!existsSync(stdlib)) throw new Error(`no standard library for ${python} at ${stdlib}`);
  const pip = '/usr/lib/python3/dist-packages/pip';
  if (!existsSync(pip)) {
    throw new BaseUnavailable('pip is not installed on this host: install Debian’s python3-pip');
  }
  if (hostPackages) await needTorch(python);
  const busybox = ['/bin/busybox', '/usr/bin/busybox'].find((p) => existsSync(p));
  if (!busybox)
    throw new BaseUnavailable('busybox is not installed on this host: install busybox-static');
  const root = await mkdtemp(join(tmpdir(), 'trainyard-base-'));
  try {
    const { stdout: dynload } = await run(
      'find',
      [stdlib, ...(hostPackages ? [HOST_PACKAGES] : []), '-name', '*.so*', '-type', 'f'],
      { maxBuffer: 64 * 1024 * 1024 },
    );
    const extensions = dynload.split('\n').filter(Boolean);
    const packages = hostPackages
      ? [HOST_PACKAGES]
      : ['pip', 'setuptools', 'pkg_resources', '_distutils_hack', 'wheel'].map(
          (name) => `${HOST_PACKAGES}/${name}`,
        );
    await copyIn(root, [python, stdlib, ...packages, '/usr/share/python-wheels']);
    // Debian's packages link to libraries outside their directory (torch/lib/libtorch.so, say).
    const linked = hostPackages ? await linkedOut(HOST_PACKAGES) : [];
    const libs = await sharedLibraries([python, busybox, ENV, ...extensions, ...linked]);
    // One copy of each: `ldd` names /lib/x/libtorch.so.1.13 what a link names /usr/lib/x/….
    await copyIn(root, [...new Set([...linked, ...libs].map(inRealDirectory))], true);
    await linkTopLevelLikeHost(root);
    await rm(join(root, stdlib, 'EXTERNALLY-MANAGED'), { force: true });
    await symlink(version, join(root, 'usr/bin/python3'));
    await symlink('python3', join(root, 'usr/bin/python'));
    await mkdir(join(root, 'bin'), { recursive: true });
    await run('cp', [busybox, join(root, 'bin/busybox')]);
    const { stdout: applets } = await run(busybox, ['--list']);
    for (const applet of applets.split('\n').filter((a) => /^[a-z0-9_.[-]+$/.test(a))) {
      if (applet !== 'busybox') await symlink('busybox', join(root, 'bin', applet));
    }
    await rm(join(root, ENV), { force: true });
    await run('cp', [ENV, join(root, ENV)]);
    await mkdir(join(root, 'etc'));
    await writeFile(
      join(root, 'etc/passwd'),
      'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n',
    );
    await writeFile(join(root, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
    // No /workspace: a job's image makes it, its build's own.
    for (const dir of ['tmp', 'root']) await mkdir(join(root, dir));
    await chmod(join(root, 'tmp'), 0o1777);
    await importRoot(docker, root, ref, [
      'ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8',
      'CMD ["python3"]',
      `LABEL ${BASE_RECIPE_LABEL}=${BASE_RECIPE}`,
    ]);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

/** `path` with the links among its directories resolved, its own name kept. */
function inRealDirectory(path: string): string {
  return existsSync(dirname(path)) ? join(realpathSync(dirname(path)), basename(path)) : path;
}

/**
 * The top-level directories that are links on this host (/lib -> usr/lib, /bin -> usr/bin on a
 * merged-/usr Debian) made links in `root` too, where what they name was copied.
 */
async function linkTopLevelLikeHost(root: string): Promise<void> {
  for (const dir of ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32']) {
    const target = await readlink(`/${dir}`).catch(() => null);
    if (target === null || existsSync(join(root, dir))) continue;
    if (existsSync(join(root, target))) await symlink(target, join(root, dir));
  }
}

/** Where Debian installs Python packages, for every version of the interpreter. */
const HOST_PACKAGES = '/usr/lib/python3/dist-packages';

/** What the links under `dir` name outside it, by the paths the links give. */
async function linkedOut(dir: string): Promise<string[]> {
  const { stdout } = await run('find', [dir, '-type', 'l'], { maxBuffer: 64 * 1024 * 1024 });
  const targets = new Set<string>();
  for (const link of stdout.split('\n').filter(Boolean)) {
    const target = resolve(dirname(link), await readlink(link));
    if (!target.startsWith(`${dir}/`)) targets.add(target);
  }
  return [...targets];
}

/** A local base this host cannot make: what it lacks is for its operator to install. */
export class BaseUnavailable extends Error {
  override name = 'BaseUnavailable';
}

/** Refuses to make a PyTorch base on a host whose Python has no PyTorch. */
async function needTorch(python: string): Promise<void> {
  try {
    await run(python, ['-c', 'import torch']);
  } catch {
    throw new BaseUnavailable(
      `the pytorch base is made from this host’s PyTorch, and ${python} has none: install Debian’s python3-torch (scripts/setup.sh --torch), or name another base`,
    );
  }
}

/** Imports the directory `root` as the image `ref`, with Dockerfile `changes` applied. */
async function importRoot(
  docker: Docker,
  root: string,
  ref: string,
  changes: string[],
): Promise<void> {
  const tar = spawn('tar', ['-C', root, '-cf', '-', '.'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  tar.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [repo, tag] = splitTag(ref);
  const stream = await docker.importImage(tar.stdout, { repo, tag, changes });
  await new Promise<void>((resolve, reject) =>
    docker.modem.followProgress(stream, (err: Error | null) => (err ? reject(err) : resolve())),
  );
  const code = await new Promise<number | null>((resolve) => {
    if (tar.exitCode !== null) resolve(tar.exitCode);
    else tar.once('exit', resolve);
  });
  if (code !== 0) throw new Error(`tar failed with ${code}: ${stderr.trim()}`);
  if (!(await hasImage(docker, ref))) throw new Error(`the import of ${ref} made no image`);
}

/** `repo:tag` split at the tag's colon (a registry's port has one too). */
function splitTag(ref: string): [string, string] {
  const slash = ref.lastIndexOf('/');
  const colon = ref.lastIndexOf(':');
  return colon > slash ? [ref.slice(0, colon), ref.slice(colon + 1)] : [ref, 'latest'];
}

/** The recipe the engine's image `ref` was made by: '' where it names none, null with no image. */
export async function baseRecipeOf(docker: Docker, ref: string): Promise<string | null> {
  const info = await inspected(docker, ref);
  return info && (info.Config?.Labels?.[BASE_RECIPE_LABEL] ?? '');
}

/**
 * Makes a local base image when the engine lacks it or holds one an earlier recipe made (a later
 * one's is kept); true when it was made now.
 */
export async function ensureLocalBaseImage(
  docker: Docker,
  base: { ref: string; hostPackages: boolean } = LOCAL_BASES[DEFAULT_BASE_ALIAS],
): Promise<boolean> {
  const recipe = await baseRecipeOf(docker, base.ref);
  if (recipe !== null && Number.parseInt(recipe, 10) >= BASE_RECIPE) return false;
  await makePythonBaseImage(docker, base.ref, base.hostPackages);
  return true;
}
