import { posix } from 'node:path';

export interface ArchiveLimits {
  /** The most bytes the archive may unpack to. */
  maxBytes: number;
  /** The most entries (files, directories, links) it may hold. */
  maxEntries: number;
  /**
   * The most it may expand, unpacked bytes over archive bytes, once it unpacks to more than
   * `ratioFloorBytes`: past that, a high ratio is a compression bomb, not code.
   */
  maxRatio: number;
  ratioFloorBytes: number;
}

/** Sized for code: a repository with its small data files, not a dataset. */
export const DEFAULT_ARCHIVE_LIMITS: ArchiveLimits = {
  maxBytes: 4 * 1024 ** 3,
  maxEntries: 50_000,
  maxRatio: 200,
  ratioFloorBytes: 64 * 1024 ** 2,
};

/** The limits a service's configuration sets (`TRAINYARD_ARCHIVE_MAX_BYTES`, `_MAX_ENTRIES`). */
export function archiveLimits(config: {
  TRAINYARD_ARCHIVE_MAX_BYTES: number;
  TRAINYARD_ARCHIVE_MAX_ENTRIES: number;
}): ArchiveLimits {
  return {
    ...DEFAULT_ARCHIVE_LIMITS,
    maxBytes: config.TRAINYARD_ARCHIVE_MAX_BYTES,
    maxEntries: config.TRAINYARD_ARCHIVE_MAX_ENTRIES,
  };
}

/** The archive is malformed or unsafe; the user's fault, never retried. */
export class ArchiveError extends Error {
  override name = 'ArchiveError';
  readonly code = 'BAD_ARCHIVE';
}

/** One entry of an archive, as its directory describes it. */
export interface ArchiveEntry {
  /** Normalized, relative, `/`-separated, with no trailing slash. */
  path: string;
  kind: 'file' | 'directory' | 'link';
  size: number;
  /** A link's target, as written. */
  target?: string;
  executable?: boolean;
}

/** How deep an entry may lie: code is not nested deeper, and a path too deep breaks unpacking. */
const MAX_DEPTH = 64;

/** `name` as a clean relative path inside the destination, or an error naming it. */
export function safeRelative(name: string): string {
  const slashed = name.replace(/\\/g, '/');
  const clean = posix.normalize(slashed).replace(/\/+$/, '');
  if (
    posix.isAbsolute(slashed) ||
    clean === '' ||
    clean === '..' ||
    clean.startsWith('../') ||
    slashed.split('/').includes('..')
  ) {
    throw new ArchiveError(`entry "${name}" points outside the archive`);
  }
  if (/[\0]/.test(name)) throw new ArchiveError(`entry "${name}" has a NUL in its name`);
  const parts = clean.split('/');
  if (parts.some((p) => Buffer.byteLength(p) > 255))
    throw new ArchiveError(`entry "${name.slice(0, 80)}…" has a name longer than 255 bytes`);
  if (parts.length > MAX_DEPTH)
    throw new ArchiveError(
      `entry "${name.slice(0, 80)}…" lies more than ${MAX_DEPTH} directories deep`,
    );
  return clean === '.' ? '.' : clean;
}

/** `a/b/c` -> `a`, `a/b`: every directory above an entry. */
function ancestors(path: string): string[] {
  const parts = path.split('/');
  return parts.slice(1).map((_, i) => parts.slice(0, i + 1).join('/'));
}

/**
 * The rules every archive obeys before a byte of it is written: entries of known kinds with
 * clean relative paths, each path once, nothing placed under a link (so nothing is ever written
 * through one), and links that point inside the tree without passing through another link.
 */
export function checkEntries(entries: ArchiveEntry[], limits: ArchiveLimits, archiveBytes: number) {
  if (entries.length > limits.maxEntries)
    throw new ArchiveError(`it holds ${entries.length} entries, more than ${limits.maxEntries}`);
  const total = entries.reduce((sum, e) => sum + e.size, 0);
  if (total > limits.maxBytes)
    throw new ArchiveError(`it unpacks to ${total} bytes, more than ${limits.maxBytes}`);
  if (total > limits.ratioFloorBytes && total / Math.max(1, archiveBytes) > limits.maxRatio) {
    throw new ArchiveError(
      `it unpacks to ${total} bytes from ${archiveBytes}, more than ${limits.maxRatio} times its size: a compression bomb`,
    );
  }
  const kinds = new Map<string, ArchiveEntry['kind']>();
  for (const e of entries) {
    const seen = kinds.get(e.path);
    if (seen && !(seen === 'directory' && e.kind === 'directory'))
      throw new ArchiveError(`entry "${e.path}" appears twice`);
    kinds.set(e.path, e.kind);
  }
  const links = new Set(entries.filter((e) => e.kind === 'link').map((e) => e.path));
  for (const e of entries) {
    const through = ancestors(e.path).find((a) => links.has(a) || kinds.get(a) === 'file');
    if (through)
      throw new ArchiveError(`entry "${e.path}" lies under "${through}", which is not a directory`);
    if (e.kind === 'link') checkLink(e.path, e.target ?? '', links);
  }
}

/** A link must stay inside the tree, and must not reach its target through another link. */
function checkLink(path: string, target: string, links: Set<string>): void {
  if (target === '' || posix.isAbsolute(target) || target.includes('\0'))
    throw new ArchiveError(`link "${path}" points to "${target}", outside the archive`);
  const at = path.split('/').slice(0, -1);
  for (const part of target.replace(/\\/g, '/').split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') {
      if (at.length === 0)
        throw new ArchiveError(`link "${path}" points to "${target}", outside the archive`);
      at.pop();
      continue;
    }
    at.push(part);
    const here = at.join('/');
    if (links.has(here))
      throw new ArchiveError(`link "${path}" points through another link, "${here}"`);
  }
}
