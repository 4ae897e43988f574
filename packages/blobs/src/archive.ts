import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open as openFile, stat } from 'node:fs/promises';
import { dirname, sep } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import * as tar from 'tar';
import {
  ArchiveError,
  checkEntries,
  DEFAULT_ARCHIVE_LIMITS,
  safeRelative,
  type ArchiveEntry,
  type ArchiveLimits,
} from './archive-rules.ts';
import { extractZip, listZip } from './zip.ts';

export {
  ArchiveError,
  archiveLimits,
  DEFAULT_ARCHIVE_LIMITS,
  type ArchiveEntry,
  type ArchiveLimits,
} from './archive-rules.ts';

export type ArchiveFormat = 'zip' | 'tar.gz';

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
