import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createWriteStream } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '@trainyard/testkit';
import {
  ArchiveError,
  DEFAULT_ARCHIVE_LIMITS,
  packDirectory,
  unpackArchive,
} from '../src/index.ts';

let dir: Awaited<ReturnType<typeof tempDir>>;

/** Writes an archive with Python's tarfile/zipfile, which let us build hostile entries. */
function pyArchive(
  kind: 'tar.gz' | 'zip',
  out: string,
  entries: { name: string; data?: string; link?: string }[],
) {
  const script =
    kind === 'tar.gz'
      ? `
import io, json, sys, tarfile
entries = json.loads(sys.argv[2])
with tarfile.open(sys.argv[1], 'w:gz') as t:
    for e in entries:
        info = tarfile.TarInfo(e['name'])
        if 'link' in e:
            info.type = tarfile.SYMTYPE
            info.linkname = e['link']
            t.addfile(info)
        else:
            data = e.get('data', '').encode()
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
`
      : `
import json, sys, zipfile
entries = json.loads(sys.argv[2])
with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:
    for e in entries:
        info = zipfile.ZipInfo(e['name'])
        info.compress_type = zipfile.ZIP_DEFLATED
        if 'link' in e:
            info.external_attr = (0o120777 << 16)
            z.writestr(info, e['link'])
        else:
            info.external_attr = (0o100644 << 16)
            z.writestr(info, e.get('data', ''))
`;
  execFileSync('python3', ['-c', script, out, JSON.stringify(entries)]);
}

beforeAll(async () => {
  dir = await tempDir();
});
afterAll(async () => dir.remove());

describe('code archives', () => {
  it('round-trips a directory through packDirectory and unpackArchive, leaving out .git', async () => {
    const src = join(dir.path, 'src');
    await mkdir(join(src, 'pkg'), { recursive: true });
    await mkdir(join(src, '.git'), { recursive: true });
    await writeFile(join(src, 'train.py'), 'print(1)\n');
    await writeFile(join(src, 'pkg', 'mod.py'), 'x = 2\n');
    await writeFile(join(src, '.git', 'HEAD'), 'ref\n');
    const file = join(dir.path, 'code.tar.gz');
    await pipeline(packDirectory(src), createWriteStream(file));
    const out = join(dir.path, 'out');
    await unpackArchive(file, 'tar.gz', out);
    expect(readFileSync(join(out, 'pkg', 'mod.py'), 'utf8')).toBe('x = 2\n');
    expect(existsSync(join(out, '.git'))).toBe(false);
  });

  it('unpacks a zip', async () => {
    const file = join(dir.path, 'ok.zip');
    pyArchive('zip', file, [{ name: 'a/b.txt', data: 'bee' }]);
    const out = join(dir.path, 'zip-out');
    await unpackArchive(file, 'zip', out);
    expect(readFileSync(join(out, 'a', 'b.txt'), 'utf8')).toBe('bee');
  });

  const hostile: [string, 'tar.gz' | 'zip', { name: string; data?: string; link?: string }[]][] = [
    ['a tar entry climbing out with ..', 'tar.gz', [{ name: '../escaped.txt', data: 'x' }]],
    [
      'a tar entry with an absolute path',
      'tar.gz',
      [{ name: '/tmp/trainyard-abs.txt', data: 'x' }],
    ],
    ['a tar symlink pointing outside', 'tar.gz', [{ name: 'link', link: '../../etc/passwd' }]],
    ['a zip entry climbing out with ..', 'zip', [{ name: '../escaped.txt', data: 'x' }]],
    [
      'a zip whose links form a chain out of the tree',
      'zip',
      [
        { name: 'd', link: '.' },
        { name: 'e', link: 'd/..' },
        { name: 'e/f', link: '..' },
        { name: 'e/f/escaped.txt', data: 'x' },
      ],
    ],
    [
      'a tar whose links form a chain out of the tree',
      'tar.gz',
      [
        { name: 'd', link: '.' },
        { name: 'e', link: 'd/..' },
        { name: 'e/f', link: '..' },
        { name: 'e/f/escaped.txt', data: 'x' },
      ],
    ],
    [
      'a file written under a link that points inside',
      'tar.gz',
      [
        { name: 'sub/keep.txt', data: 'x' },
        { name: 'alias', link: 'sub' },
        { name: 'alias/escaped.txt', data: 'x' },
      ],
    ],
    [
      'a file and a link at one path',
      'zip',
      [
        { name: 'escaped.txt', data: 'x' },
        { name: 'escaped.txt', link: '../escaped.txt' },
      ],
    ],
  ];
  for (const [what, kind, entries] of hostile) {
    it(`refuses ${what}, writing nothing outside`, async () => {
      const file = join(dir.path, `bad-${Math.random().toString(36).slice(2)}.${kind}`);
      pyArchive(kind, file, entries);
      const out = join(dir.path, 'box', 'inner');
      await expect(unpackArchive(file, kind, out)).rejects.toBeInstanceOf(ArchiveError);
      expect(existsSync(join(dir.path, 'box', 'escaped.txt'))).toBe(false);
      expect(existsSync('/tmp/trainyard-abs.txt')).toBe(false);
      expect(existsSync(out)).toBe(false);
    });
  }

  it('refuses a file that is not the archive it claims to be', async () => {
    const file = join(dir.path, 'fake.zip');
    await writeFile(file, 'not an archive');
    await expect(unpackArchive(file, 'zip', join(dir.path, 'fake-out'))).rejects.toThrow(
      /not a zip/,
    );
  });

  it('refuses an archive over the size limit', async () => {
    const file = join(dir.path, 'large.tar.gz');
    pyArchive('tar.gz', file, [{ name: 'big.txt', data: 'y'.repeat(5000) }]);
    await expect(
      unpackArchive(file, 'tar.gz', join(dir.path, 'large-out'), {
        ...DEFAULT_ARCHIVE_LIMITS,
        maxBytes: 1000,
      }),
    ).rejects.toThrow(/more than 1000/);
  });

  it('refuses a zip bomb (1 MiB that unpacks to 1 GiB) from its directory, writing nothing', async () => {
    const file = join(dir.path, 'bomb.zip');
    execFileSync('python3', [
      '-c',
      `import sys, zipfile
with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED, compresslevel=9) as z:
    with z.open('zeros.bin', 'w', force_zip64=True) as f:
        block = bytes(1 << 20)
        for _ in range(1024): f.write(block)`,
      file,
    ]);
    expect(statSync(file).size).toBeLessThan(2 * 1024 ** 2);
    const out = join(dir.path, 'bomb-out');
    await expect(unpackArchive(file, 'zip', out)).rejects.toThrow(/compression bomb/);
    expect(existsSync(out)).toBe(false);
  });

  it('refuses a zip of 100,001 entries from its directory, writing nothing', async () => {
    const file = join(dir.path, 'many.zip');
    execFileSync('python3', [
      '-c',
      `import sys, zipfile
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    for i in range(100001): z.writestr(f'f{i}', '')`,
      file,
    ]);
    const out = join(dir.path, 'many-out');
    await expect(unpackArchive(file, 'zip', out)).rejects.toThrow(
      /holds 100001 entries, more than 50000/,
    );
    expect(existsSync(out)).toBe(false);
  });

  it('keeps links that point inside the tree, and what they point at', async () => {
    const file = join(dir.path, 'links.zip');
    pyArchive('zip', file, [
      { name: 'data/train.csv', data: 'a,b' },
      { name: 'current', link: 'data/train.csv' },
      { name: 'deep/up', link: '../data' },
    ]);
    const out = join(dir.path, 'links-out');
    await unpackArchive(file, 'zip', out);
    expect(readFileSync(join(out, 'current'), 'utf8')).toBe('a,b');
    expect(readlinkSync(join(out, 'deep', 'up'))).toBe('../data');
  });
});
