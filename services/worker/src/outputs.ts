import { lstat, readdir } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import type { OutputFile } from '@trainyard/events';
import { BlobKeys, putFile, type BlobStore } from '@trainyard/platform';

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
 * Mirrors an attempt's output directory into the blob store: each scan uploads files that are
 * new or changed since the last one and reports the manifest when it changed.
 */
export class OutputMirror {
  readonly #seen = new Map<string, Seen>();

  constructor(
    private readonly dir: string,
    private readonly jobId: string,
    private readonly blobs: BlobStore,
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
      const ref = await putFile(this.blobs, BlobKeys.output(this.jobId, path), file);
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
