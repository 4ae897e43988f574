import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open as openFile, stat, symlink } from 'node:fs/promises';
import { dirname, join, posix, sep } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import * as tar from 'tar';
import yauzl from 'yauzl';

export type ArchiveFormat = 'zip' | 'tar.gz';

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

/** Tells the format from the first bytes: gzip (`1f 8b`) or zip (`PK\x03\x04` / empty `PK\x05\x06`). */
export function sniffFormat(head: Uint8Array): ArchiveFormat | null {
  if (head[0] === 0x1f && head[1] === 0x8b) return 'tar.gz';
  if (head[0] === 0x50 && head[1] === 0x4b && (head[2] === 3 || head[2] === 5)) return 'zip';
  return null;
}

/** Reads the first bytes of a file and tells its archive format. */
export async function sniffFile(path: string): Promise<ArchiveFormat | null> {
  const fh = await openFile(path, 'r');
  try {
    const buf = Buffer.alloc(4);
    await fh.read(buf, 0, 4, 0);
    return sniffFormat(buf);
  } finally {
    await fh.close();
  }
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
function safeRelative(name: string): string {
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
function checkEntries(entries: ArchiveEntry[], limits: ArchiveLimits, archiveBytes: number) {
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

const TAR_KINDS: Record<string, ArchiveEntry['kind']> = {
  File: 'file',
  OldFile: 'file',
  ContiguousFile: 'file',
  Directory: 'directory',
  SymbolicLink: 'link',
};

/** Counts bytes through a stream, and stops it once they pass `max`. */
function byteCap(max: number, what: () => string): Transform {
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      seen += chunk.length;
      if (seen > max) done(new ArchiveError(what()));
      else done(null, chunk);
    },
  });
}

async function listTar(file: string, limits: ArchiveLimits): Promise<ArchiveEntry[]> {
  const entries: ArchiveEntry[] = [];
  let problem: ArchiveError | null = null;
  const parser = new tar.Parser({
    strict: true,
    onReadEntry: (entry) => {
      entry.resume();
      if (problem) return;
      try {
        const kind = TAR_KINDS[entry.type];
        if (!kind)
          throw new ArchiveError(`entry "${entry.path}" is a ${entry.type}, which is not allowed`);
        const path = safeRelative(entry.path);
        if (path === '.' && kind !== 'directory')
          throw new ArchiveError(
            `entry "${entry.path}" is the archive's root, but not a directory`,
          );
        if (path !== '.') {
          entries.push({
            path,
            kind,
            size: kind === 'file' ? (entry.size ?? 0) : 0,
            ...(kind === 'link' && { target: entry.linkpath ?? '' }),
          });
        }
        if (entries.length > limits.maxEntries)
          throw new ArchiveError(`it holds more than ${limits.maxEntries} entries`);
      } catch (err) {
        problem = err as ArchiveError;
        parser.abort(problem);
      }
    },
  });
  const headroom = limits.maxBytes + 512 * (limits.maxEntries + 2) + 10 * 1024 * 1024;
  await pipeline(
    createReadStream(file),
    createGunzip(),
    byteCap(headroom, () => `it unpacks to more than ${limits.maxBytes} bytes`),
    parser,
  ).catch((cause: unknown) => {
    if (problem) throw problem;
    if (cause instanceof ArchiveError) throw cause;
    throw new ArchiveError(`not a valid .tar.gz archive: ${(cause as Error).message}`, { cause });
  });
  if (problem) throw problem;
  return entries;
}

function openZip(file: string): Promise<yauzl.ZipFile> {
  return new Promise((res, rej) =>
    yauzl.open(
      file,
      { lazyEntries: true, strictFileNames: true, validateEntrySizes: true },
      (err, zip) =>
        err
          ? rej(new ArchiveError(`not a valid .zip archive: ${err.message}`, { cause: err }))
          : res(zip),
    ),
  );
}

/** Calls `each` for every entry of a zip's central directory, in order, one at a time. */
async function walkZip(
  zip: yauzl.ZipFile,
  each: (entry: yauzl.Entry) => Promise<void> | void,
): Promise<void> {
  await new Promise<void>((res, rej) => {
    zip.on('error', (err: Error) => rej(new ArchiveError(err.message, { cause: err })));
    zip.on('end', res);
    zip.on('entry', (entry: yauzl.Entry) => {
      Promise.resolve()
        .then(() => each(entry))
        .then(() => zip.readEntry(), rej);
    });
    zip.readEntry();
  });
}

const zipMode = (entry: yauzl.Entry) => (entry.externalFileAttributes >>> 16) & 0o170000;

async function listZip(file: string, limits: ArchiveLimits): Promise<ArchiveEntry[]> {
  const zip = await openZip(file);
  const entries: ArchiveEntry[] = [];
  try {
    if (zip.entryCount > limits.maxEntries)
      throw new ArchiveError(`it holds ${zip.entryCount} entries, more than ${limits.maxEntries}`);
    await walkZip(zip, async (entry) => {
      const path = safeRelative(entry.fileName);
      if (path === '.' && !entry.fileName.endsWith('/'))
        throw new ArchiveError(
          `entry "${entry.fileName}" is the archive's root, but not a directory`,
        );
      if (entry.fileName.endsWith('/')) {
        entries.push({ path, kind: 'directory', size: 0 });
        return;
      }
      const mode = zipMode(entry);
      if (mode === 0o120000) {
        if (entry.uncompressedSize > 4096)
          throw new ArchiveError(`link "${path}" has a target longer than 4096 bytes`);
        entries.push({ path, kind: 'link', size: 0, target: await readZipEntry(zip, entry) });
        return;
      }
      if (mode !== 0 && mode !== 0o100000)
        throw new ArchiveError(`entry "${path}" is not a file, a directory or a link`);
      const perm = (entry.externalFileAttributes >>> 16) & 0o777;
      entries.push({
        path,
        kind: 'file',
        size: entry.uncompressedSize,
        executable: !!(perm & 0o100),
      });
    });
  } finally {
    zip.close();
  }
  return entries;
}

async function readZipEntry(zip: yauzl.ZipFile, entry: yauzl.Entry): Promise<string> {
  const stream = await new Promise<Readable>((ok, fail) =>
    zip.openReadStream(entry, (err, s) => (err ? fail(err) : ok(s))),
  );
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString();
}

/**
 * Reads an archive's directory and checks it against the rules and the limits without writing
 * anything: what `unpackArchive` does first, and what the API does to an upload.
 */
export async function inspectArchive(
  file: string,
  format: ArchiveFormat,
  limits: ArchiveLimits = DEFAULT_ARCHIVE_LIMITS,
): Promise<ArchiveEntry[]> {
  const actual = await sniffFile(file);
  if (actual !== format) throw new ArchiveError(`the file is not a ${format} archive`);
  const entries = format === 'zip' ? await listZip(file, limits) : await listTar(file, limits);
  checkEntries(entries, limits, (await stat(file)).size);
  return entries;
}

async function extractZip(file: string, dest: string, planned: ArchiveEntry[]): Promise<void> {
  const byPath = new Map(planned.map((e) => [e.path, e]));
  const zip = await openZip(file);
  try {
    await walkZip(zip, async (entry) => {
      const e = byPath.get(safeRelative(entry.fileName));
      if (!e) throw new ArchiveError(`entry "${entry.fileName}" changed while it was unpacked`);
      const target = join(dest, e.path);
      if (e.kind === 'directory') {
        await mkdir(target, { recursive: true });
        return;
      }
      await mkdir(dirname(target), { recursive: true });
      if (e.kind === 'link') {
        await symlink(e.target!, target);
        return;
      }
      const stream = await new Promise<Readable>((ok, fail) =>
        zip.openReadStream(entry, (err, s) => (err ? fail(err) : ok(s))),
      );
      await pipeline(
        stream,
        createWriteStream(target, { flags: 'wx', mode: e.executable ? 0o755 : 0o644 }),
      );
    });
  } finally {
    zip.close();
  }
}

/**
 * Unpacks a code archive into `dest`: first its whole directory is read and checked (no
 * absolute paths, no `..`, no entry under a link or written twice, no link out of the tree or
 * through another link, no devices, bounded size, count and compression ratio), and only then
 * is anything written. Throws `ArchiveError` naming the offending entry.
 */
export async function unpackArchive(
  file: string,
  format: ArchiveFormat,
  dest: string,
  limits: ArchiveLimits = DEFAULT_ARCHIVE_LIMITS,
): Promise<void> {
  const entries = await inspectArchive(file, format, limits);
  await mkdir(dest, { recursive: true });
  try {
    if (format === 'zip') await extractZip(file, dest, entries);
    else await extractTar(file, dest, entries);
  } catch (err) {
    if (err instanceof ArchiveError) throw err;
    const code = (err as NodeJS.ErrnoException).code ?? '';
    if (/^(ENOSPC|EIO|EMFILE|ENFILE)$/.test(code)) throw err;
    throw new ArchiveError(`it could not be unpacked: ${(err as Error).message}`, { cause: err });
  }
}

async function extractTar(file: string, dest: string, entries: ArchiveEntry[]): Promise<void> {
  const allowed = new Set(entries.map((e) => e.path));
  await tar.x({
    file,
    cwd: dest,
    strict: true,
    preservePaths: false,
    preserveOwner: false,
    filter: (path) => {
      const clean = safeRelative(path);
      return clean === '.' || allowed.has(clean);
    },
  });
}

/** Packs a directory into a gzipped tarball stream, leaving out `.git` and `node_modules`. */
export function packDirectory(dir: string): Readable {
  return tar.c(
    {
      gzip: true,
      cwd: dir,
      portable: true,
      filter: (path) => !path.split(sep).some((p) => p === '.git' || p === 'node_modules'),
    },
    ['.'],
  ) as unknown as Readable;
}

/** Writes a stream to a new file readable by its owner alone, creating its directory. */
export async function streamToFile(stream: Readable, file: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  await pipeline(stream, createWriteStream(file, { mode: 0o600 }));
}
