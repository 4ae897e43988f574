import { constants, createReadStream } from 'node:fs';
import { type FileHandle, lstat, open, readdir } from 'node:fs/promises';
import { retryTransient, type BlobRef, type OutputFile } from '@trainyard/events';
import { BlobKeys, type BlobStore } from '@trainyard/blobs';
import { JOB_FILE } from '@trainyard/runtime';

interface Seen {
  sizeBytes: number;
  mtimeMs: number;
  sha256: string;
}

const DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
/** How many directories deep below the output directory files are looked for. */
const MAX_DEPTH = 64;

/** `name` in the directory open as `dir`, reached through its handle, not its path. */
const inDirectory = (dir: FileHandle, name: string) => `/proc/self/fd/${dir.fd}/${name}`;

/**
 * Hands `visit` each regular file beneath the directory `root`: its path from `root`
 * (`/`-separated) and a path that reaches it through its directory's handle, open while `visit`
 * runs. Each directory is opened without following a link and listed through its handle, so
 * that a directory the job swaps for a link meanwhile leads the worker, which reads with more
 * rights than the job, nowhere outside what it opened.
 */
export async function walkJobFiles(
  root: string,
  visit: (path: string, at: string) => Promise<void>,
): Promise<void> {
  const top = await open(root, DIRECTORY).catch(() => null);
  if (top) await walkIn(top, '', 0, visit);
}

async function walkIn(
  dir: FileHandle,
  prefix: string,
  depth: number,
  visit: (path: string, at: string) => Promise<void>,
): Promise<void> {
  try {
    const listed = readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true });
    for (const entry of await listed.catch(() => [])) {
      const path = prefix + entry.name;
      if (entry.isFile()) await visit(path, inDirectory(dir, entry.name));
      else if (entry.isDirectory() && depth < MAX_DEPTH) {
        const sub = await open(inDirectory(dir, entry.name), DIRECTORY).catch(() => null);
        if (sub) await walkIn(sub, `${path}/`, depth + 1, visit);
      }
    }
  } finally {
    await dir.close();
  }
}

/**
 * Uploads a file the job wrote (`at`, a path through its directory's handle), as no more than
 * that file: it is opened without following a link, and must be a regular file owned by the
 * attempt's user (`owner`), checked on what was opened: never a hard link to another's file.
 */
async function putJobFile(
  blobs: BlobStore,
  key: string,
  at: string,
  owner: number | undefined,
): Promise<BlobRef | null> {
  const handle = await open(at, JOB_FILE);
  try {
    const info = await handle.stat();
    if (!info.isFile() || (owner !== undefined && info.uid !== owner)) return null;
    return await retryTransient(`store ${key}`, () =>
      blobs.put(
        key,
        createReadStream('', {
          fd: handle.fd,
          start: 0,
          end: Math.max(0, info.size - 1),
          autoClose: false,
        }),
        info.size,
      ),
    );
  } finally {
    await handle.close();
  }
}

/**
 * Mirrors an attempt's output directory into the blob store: each scan uploads files that are
 * new or changed since the last one and reports the manifest when it changed.
 */
export class OutputMirror {
  readonly #seen = new Map<string, Seen>();

  constructor(
    private readonly dir: string,
    private readonly jobId: string,
    private readonly attemptId: string,
    private readonly blobs: BlobStore,
    /** The uid of the attempt's user, when it has one of its own: only its files are read. */
    private readonly owner?: number,
  ) {}

  /** Uploads what changed; returns the new manifest, or null when nothing changed. */
  async scan(): Promise<OutputFile[] | null> {
    let changed = false;
    const present = new Set<string>();
    await walkJobFiles(this.dir, async (path, at) => {
      const stat = await lstat(at).catch(() => null);
      if (!stat?.isFile()) return;
      present.add(path);
      const seen = this.#seen.get(path);
      if (seen && seen.sizeBytes === stat.size && seen.mtimeMs === stat.mtimeMs) return;
      const key = BlobKeys.attemptOutput(this.jobId, this.attemptId, path);
      const ref = await putJobFile(this.blobs, key, at, this.owner).catch(() => null);
      if (!ref) {
        present.delete(path);
        return;
      }
      this.#seen.set(path, { sizeBytes: ref.sizeBytes, mtimeMs: stat.mtimeMs, sha256: ref.sha256 });
      if (!seen || seen.sha256 !== ref.sha256 || seen.sizeBytes !== ref.sizeBytes) changed = true;
    });
    for (const path of [...this.#seen.keys()]) {
      if (!present.has(path)) {
        this.#seen.delete(path);
        changed = true;
      }
    }
    return changed ? this.manifest() : null;
  }

  manifest(): OutputFile[] {
    return [...this.#seen]
      .map(([path, s]) => ({ path, sizeBytes: s.sizeBytes, sha256: s.sha256 }))
      .sort((a, b) => (a.path < b.path ? -1 : 1));
  }
}
