import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '@trainyard/testkit';
import { download } from '../src/download.ts';

let dir: Awaited<ReturnType<typeof tempDir>>;
beforeAll(async () => (dir = await tempDir('trainyard-download-')));
afterAll(async () => dir.remove());

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

describe('an output download', () => {
  it('keeps the file when its sha256 matches the server’s', async () => {
    const target = join(dir.path, 'ok', 'model.bin');
    await download(new Response('weights'), target, sha('weights'));
    expect(readFileSync(target, 'utf8')).toBe('weights');
  });

  it('keeps nothing, and says so, when the bytes do not match', async () => {
    const target = join(dir.path, 'bad', 'model.bin');
    await expect(download(new Response('tampered'), target, sha('weights'))).rejects.toThrow(
      /its sha256 is [0-9a-f]{64}, the server has [0-9a-f]{64}; the download was corrupted/,
    );
    expect(existsSync(target)).toBe(false);
    expect(readdirSync(join(dir.path, 'bad'))).toEqual([]);
  });
});
