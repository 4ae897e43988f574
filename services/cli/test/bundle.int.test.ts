import { execFile } from 'node:child_process';
import { statSync } from 'node:fs';
import { utimes } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';

const CLI = fileURLToPath(new URL('..', import.meta.url));
const BIN = `${CLI}bin/trainyard.js`;
const BUNDLE = `${CLI}dist/trainyard.mjs`;

/** Runs `trainyard` with `args`; its exit code and output. */
async function trainyard(
  args: string[],
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [BIN, ...args], {
      env: { PATH: process.env.PATH, HOME: '/nonexistent' },
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const unreachable = ['ls', '--api', 'http://127.0.0.1:9', '--verbose'];

describe('the bundled client', () => {
  beforeAll(async () => {
    await promisify(execFile)(process.execPath, ['--import', 'tsx', 'scripts/bundle.ts'], {
      cwd: CLI,
    });
  });

  it('runs a command of the client’s own', async () => {
    const run = await trainyard(unreachable);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`file://${BUNDLE}:`);
    expect(run.stderr).toMatch(/^error: cannot reach the Trainyard API at http:\/\/127\.0\.0\.1:9/);
  });

  it('steps aside for the sources once a file it was made of is newer', async () => {
    const bundled = await trainyard(unreachable);
    expect(bundled.stderr).toContain(`file://${BUNDLE}:`);
    const built = statSync(BUNDLE).mtime;
    await utimes(BUNDLE, built, new Date(0));
    try {
      const run = await trainyard(unreachable);
      expect(run.code).toBe(1);
      expect(run.stderr).not.toContain('trainyard.mjs');
      expect(run.stderr).toContain(`${CLI}src/client.ts`);
      expect(run.stderr.split('\n')[0]).toBe(bundled.stderr.split('\n')[0]);
    } finally {
      await utimes(BUNDLE, built, built);
    }
  });

  it('leaves the server’s commands, and those that list them, to the sources', async () => {
    const verify = await trainyard(['events', 'verify', '--help']);
    expect(verify.code).toBe(0);
    expect(verify.stdout).toContain('Usage: trainyard events verify');
    const completion = await trainyard(['completion', 'bash']);
    expect(completion.code).toBe(0);
    for (const command of ['up', 'worker', 'gateway', 'submit'])
      expect(completion.stdout).toContain(command);
  });
});
