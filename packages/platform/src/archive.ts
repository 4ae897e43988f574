import { createWriteStream } from 'node:fs';
import { mkdir, open as openFile, symlink } from 'node:fs/promises';
import { dirname, isAbsolute, join, normalize, relative, resolve, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import * as tar from 'tar';
import yauzl from 'yauzl';

export type ArchiveFormat = 'zip' | 'tar.gz';

export interface ArchiveLimits {
  maxBytes: number;
  maxEntries: number;
}

export const DEFAULT_ARCHIVE_LIMITS: ArchiveLimits = {
  maxBytes: 4 * 1024 ** 3,
  maxEntries: 100_000,
};

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

/** Throws unless `name` is a relative path that stays inside the destination. */
function safeRelative(name: string): string {
  const clean = normalize(name.replace(/\\/g, '/'));
  if (isAbsolute(name) || isAbsolute(clean) || clean.split(/[\\/]/).includes('..')) {
    throw new ArchiveError(`entry "${name}" points outside the archive`);
  }
  return clean;
}

function checkLink(entryPath: string, target: string): void {
  if (isAbsolute(target)) throw new ArchiveError(`link "${entryPath}" points to an absolute path`);
  const from = resolve('/root', dirname(entryPath));
  const to = resolve(from, target);
  const rel = relative('/root', to);
  if (rel.startsWith('..') || isAbsolute(rel)) {
    throw new ArchiveError(`link "${entryPath}" points outside the archive`);
  }
}

const TAR_TYPES = new Set(['File', 'OldFile', 'ContiguousFile', 'Directory', 'SymbolicLink']);

async function checkTar(file: string, limits: ArchiveLimits): Promise<void> {
  let bytes = 0;
  let entries = 0;
  let problem: ArchiveError | null = null;
  await tar
    .t({
      file,
      strict: true,
      onReadEntry: (entry) => {
        if (problem) return;
        try {
          entries++;
          bytes += entry.size ?? 0;
          if (!TAR_TYPES.has(entry.type)) {
            throw new ArchiveError(
              `entry "${entry.path}" is a ${entry.type}, which is not allowed`,
            );
          }
          safeRelative(entry.path);
          if (entry.type === 'SymbolicLink') checkLink(entry.path, entry.linkpath ?? '');
          if (entries > limits.maxEntries)
            throw new ArchiveError(`more than ${limits.maxEntries} entries`);
          if (bytes > limits.maxBytes)
            throw new ArchiveError(`unpacks to more than ${limits.maxBytes} bytes`);
        } catch (err) {
          problem = err as ArchiveError;
        }
      },
    })
    .catch((cause: unknown) => {
      throw new ArchiveError(`not a valid .tar.gz archive: ${(cause as Error).message}`, { cause });
    });
  if (problem) throw problem;
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

async function unpackZip(file: string, dest: string, limits: ArchiveLimits): Promise<void> {
  const zip = await openZip(file);
  let bytes = 0;
  let entries = 0;
  try {
    await new Promise<void>((res, rej) => {
      zip.on('error', (err: Error) => rej(new ArchiveError(err.message, { cause: err })));
      zip.on('end', res);
      zip.on('entry', (entry: yauzl.Entry) => {
        const handle = async () => {
          entries++;
          bytes += entry.uncompressedSize;
          if (entries > limits.maxEntries)
            throw new ArchiveError(`more than ${limits.maxEntries} entries`);
          if (bytes > limits.maxBytes)
            throw new ArchiveError(`unpacks to more than ${limits.maxBytes} bytes`);
          const rel = safeRelative(entry.fileName);
          const mode = (entry.externalFileAttributes >>> 16) & 0o170000;
          const target = join(dest, rel);
          if (entry.fileName.endsWith('/')) {
            await mkdir(target, { recursive: true });
            return;
          }
          await mkdir(dirname(target), { recursive: true });
          const stream = await new Promise<Readable>((ok, fail) =>
            zip.openReadStream(entry, (err, s) => (err ? fail(err) : ok(s))),
          );
          if (mode === 0o120000) {
            const chunks: Buffer[] = [];
            for await (const c of stream) chunks.push(c as Buffer);
            const linkTarget = Buffer.concat(chunks).toString();
            checkLink(rel, linkTarget);
            await symlink(linkTarget, target);
            return;
          }
          const perm = (entry.externalFileAttributes >>> 16) & 0o777;
          await pipeline(stream, createWriteStream(target, { mode: perm & 0o100 ? 0o755 : 0o644 }));
        };
        handle().then(() => zip.readEntry(), rej);
      });
      zip.readEntry();
    });
  } finally {
    zip.close();
  }
}

/**
 * Unpacks a code archive into `dest` after checking every entry: no absolute paths, no `..`,
 * no links out of the tree, no devices, bounded size and count. Throws `ArchiveError`.
 */
export async function unpackArchive(
  file: string,
  format: ArchiveFormat,
  dest: string,
  limits: ArchiveLimits = DEFAULT_ARCHIVE_LIMITS,
): Promise<void> {
  await mkdir(dest, { recursive: true });
  const actual = await sniffFile(file);
  if (actual !== format) throw new ArchiveError(`the file is not a ${format} archive`);
  if (format === 'zip') return unpackZip(file, dest, limits);
  await checkTar(file, limits);
  await tar.x({ file, cwd: dest, strict: true, preservePaths: false, preserveOwner: false });
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

/** Writes a stream to a file, creating its directory. */
export async function streamToFile(stream: Readable, file: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  await pipeline(stream, createWriteStream(file));
}
