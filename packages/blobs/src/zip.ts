import { createWriteStream } from 'node:fs';
import { mkdir, symlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import yauzl from 'yauzl';
import {
  ArchiveError,
  safeRelative,
  type ArchiveEntry,
  type ArchiveLimits,
} from './archive-rules.ts';

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

export async function listZip(file: string, limits: ArchiveLimits): Promise<ArchiveEntry[]> {
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

export async function extractZip(
  file: string,
  dest: string,
  planned: ArchiveEntry[],
): Promise<void> {
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
