import { constants, createReadStream } from 'node:fs';
import { lstat, open, readdir, realpath } from 'node:fs/promises';
import { dirname, join, relative, sep } from 'node:path';
import { retryTransient, type BlobRef, type OutputFile } from '@trainyard/events';
import { BlobKeys, type BlobStore } from '@trainyard/blobs';

interface Seen {
  sizeBytes: number;
  mtimeMs: number;
  sha256: string;
}

async function walk(dir: string, into: string[] = []): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  for (const entry of entries) {
    const full = join(dir, entry.name);
    if (entry.isDirectory()) await walk(full, into);
    else if (entry.isFile()) into.push(full);
  }
  return into;
}

/**
 * Uploads a file the job wrote, as no more than that file: it is opened without following a link
 * in its name, only once its directory is still inside the output directory, and must be a
 * regular file owned by the attempt's user (`owner`), checked on what was opened, so that a job
 * that swaps a directory for a link at the wrong moment still finds only its own files read.
 * The worker reads with more rights than the job, and a job could otherwise point it at a file
 * of the worker's.
 */
async function putJobFile(
  blobs: BlobStore,
  key: string,
  file: string,
  outputDir: string,
  owner: number | undefined,
): Promise<BlobRef | null> {
  const [base, parent] = await Promise.all([realpath(outputDir), realpath(dirname(file))]);
  if (parent !== base && !parent.startsWith(base + sep)) return null;
  const handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
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
    for (const file of await walk(this.dir)) {
      const path = relative(this.dir, file).split(sep).join('/');
      const stat = await lstat(file).catch(() => null);
      if (!stat?.isFile()) continue;
      present.add(path);
      const seen = this.#seen.get(path);
      if (seen && seen.sizeBytes === stat.size && seen.mtimeMs === stat.mtimeMs) continue;
      const ref = await putJobFile(
        this.blobs,
        BlobKeys.attemptOutput(this.jobId, this.attemptId, path),
        file,
        this.dir,
        this.owner,
      ).catch(() => null);
      if (!ref) {
        present.delete(path);
        continue;
      }
      this.#seen.set(path, { sizeBytes: ref.sizeBytes, mtimeMs: stat.mtimeMs, sha256: ref.sha256 });
      if (!seen || seen.sha256 !== ref.sha256 || seen.sizeBytes !== ref.sizeBytes) changed = true;
    }
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
