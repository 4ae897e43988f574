import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '@trainyard/testkit';
import { recordedStop, recordStop } from '../src/stop-record.ts';

let dir: Awaited<ReturnType<typeof tempDir>>;
beforeAll(async () => {
  dir = await tempDir('trainyard-stop-record-');
});
afterAll(async () => dir.remove());

describe('the record of a stop’s grace', () => {
  it('reads back what it wrote in this boot of the host, and nothing else', () => {
    const file = join(dir.path, 'attempt.stop');
    const now = Date.now();
    expect(recordedStop(file, now)).toBe(0);
    recordStop(file, now + 5_000);
    expect(recordedStop(file, now)).toBe(now + 5_000);
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    for (const text of [
      `${now + 5_000}\n`,
      `${now + 5_000} 00000000-0000-0000-0000-000000000000\n`,
      `${now + 5_000} ${boot}`,
      `1e12 ${boot}\n`,
      ` ${now + 5_000} ${boot}\n`,
      `0 ${boot}\n`,
      `${now + 2 * 24 * 60 * 60 * 1000} ${boot}\n`,
      '',
    ]) {
      writeFileSync(file, text);
      expect(recordedStop(file, now), JSON.stringify(text)).toBe(0);
    }
    writeFileSync(file, `${now - 1} ${boot}\n`);
    expect(recordedStop(file, now)).toBe(now - 1);
    expect(recordedStop(undefined, now)).toBe(0);
  });
});
