import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const CONNECT = fileURLToPath(new URL('../src/connect.ts', import.meta.url));

/** Runs a process that opens a database handle, then leaves `reason` rejected and unhandled. */
function survives(reason: string): Promise<{ code: number | null; out: string }> {
  const script = [
    `const { connectDb } = await import(${JSON.stringify(CONNECT)});`,
    `connectDb('postgres://127.0.0.1:1/none');`,
    `Promise.reject(${reason});`,
    `setTimeout(() => { console.log('still running'); process.exit(0); }, 200);`,
  ].join('\n');
  return new Promise((done) =>
    execFile(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script],
      (err, stdout) => done({ code: err ? (err.code as number) : 0, out: stdout }),
    ),
  );
}

describe('a service with a database handle', () => {
  it('lives on when postgres.js drops the failure of its array-types lookup', async () => {
    const lookup = `Object.assign(new Error('write CONNECTION_CLOSED'), { query: 'select b.oid, b.typarray from pg_catalog.pg_type a' })`;
    expect(await survives(lookup)).toEqual({ code: 0, out: 'still running\n' });
  });

  it('still ends on any other unhandled rejection, as Node would', async () => {
    const other = await survives(`new Error('something else')`);
    expect(other.code).not.toBe(0);
    expect(other.out).toBe('');
  });
});
