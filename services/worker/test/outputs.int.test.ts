import { execFileSync } from 'node:child_process';
import { mkdir, readFile, rename, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempDir } from '@trainyard/testkit';
import { walkJobFiles } from '../src/outputs.ts';

let tmp: Awaited<ReturnType<typeof tempDir>>;
let outputs: string;
let outside: string;

beforeEach(async () => {
  tmp = await tempDir();
  outputs = join(tmp.path, 'outputs');
  outside = join(tmp.path, 'outside');
  await mkdir(outputs);
  await mkdir(outside);
  await writeFile(join(outside, 'secret'), 'outside');
});
afterEach(() => tmp.remove());

/** Every file the walk visits, by path, with what reading it through its handle gives. */
async function walked(onVisit: (path: string) => Promise<void> = async () => {}) {
  const seen: [string, string][] = [];
  await walkJobFiles(outputs, async (path, at) => {
    await onVisit(path);
    seen.push([path, await readFile(at, 'utf8')]);
  });
  return seen.sort(([a], [b]) => (a < b ? -1 : 1));
}

describe('walking the files a job wrote', () => {
  it('visits the regular files beneath, not links, FIFOs nor what a link leads to', async () => {
    await mkdir(join(outputs, 'd', 'e'), { recursive: true });
    await writeFile(join(outputs, 'a.txt'), 'a');
    await writeFile(join(outputs, 'd', 'e', 'b.txt'), 'b');
    await symlink(outside, join(outputs, 'to-dir'));
    await symlink(join(outside, 'secret'), join(outputs, 'to-file'));
    execFileSync('mkfifo', [join(outputs, 'fifo')]);
    expect(await walked()).toEqual([
      ['a.txt', 'a'],
      ['d/e/b.txt', 'b'],
    ]);
  });

  it('finds nothing where the directory is missing or a link', async () => {
    expect(await walked()).toEqual([]);
    await rename(outputs, `${outputs}-gone`);
    expect(await walked()).toEqual([]);
    await symlink(outside, outputs);
    expect(await walked()).toEqual([]);
  });

  it('never follows a directory the job swaps for a link once it was listed', async () => {
    for (const dir of ['x', 'y']) {
      await mkdir(join(outputs, dir));
      await writeFile(join(outputs, dir, 'file'), dir);
    }
    let swapped = '';
    const seen = await walked(async (path) => {
      if (swapped) return;
      swapped = path.startsWith('x/') ? 'y' : 'x';
      await rename(join(outputs, swapped), join(tmp.path, 'moved'));
      await symlink(outside, join(outputs, swapped));
    });
    expect(seen).toEqual([[`${swapped === 'x' ? 'y' : 'x'}/file`, swapped === 'x' ? 'y' : 'x']]);
  });

  it('reads on in the directory it opened when the job moves it away and puts a link there', async () => {
    await mkdir(join(outputs, 'd'));
    await writeFile(join(outputs, 'd', 'one'), 'inside');
    await writeFile(join(outputs, 'd', 'two'), 'inside');
    await writeFile(join(outside, 'one'), 'outside');
    await writeFile(join(outside, 'two'), 'outside');
    let moved = false;
    const seen = await walked(async () => {
      if (moved) return;
      moved = true;
      await rename(join(outputs, 'd'), join(tmp.path, 'moved'));
      await symlink(outside, join(outputs, 'd'));
    });
    expect(seen).toEqual([
      ['d/one', 'inside'],
      ['d/two', 'inside'],
    ]);
  });
});
