import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
let eslint: ESLint;
/** The package graph lint enforces (`LAYERS` in eslint.config.js). */
let layers: Record<string, string[]>;
let forbiddenFor: (pkg: string) => string[];
/** The libraries the client may not import. */
let serverLibraries: string[];

beforeAll(async () => {
  eslint = new ESLint({ cwd: ROOT });
  ({
    LAYERS: layers,
    forbiddenFor,
    SERVER_LIBRARIES: serverLibraries,
  } = (await import(pathToFileURL(join(ROOT, 'eslint.config.js')).href)) as {
    LAYERS: Record<string, string[]>;
    forbiddenFor: (pkg: string) => string[];
    SERVER_LIBRARIES: string[];
  });
});

/** A real source file of each package, to which lint tests add imports. */
const FILE_OF: Record<string, string> = {
  events: 'packages/events/src/hash.ts',
  domain: 'packages/domain/src/worker.ts',
  projections: 'packages/projections/src/index.ts',
  blobs: 'packages/blobs/src/types.ts',
  'service-kit': 'packages/service-kit/src/ids.ts',
  runtime: 'packages/runtime/src/gpu.ts',
  application: 'packages/application/src/commands.ts',
  servers: 'packages/servers/src/ports.ts',
  testkit: 'packages/testkit/src/index.ts',
  tunnel: 'packages/tunnel/src/frames.ts',
  cli: 'services/cli/src/output.ts',
};
const fileOf = (pkg: string) => FILE_OF[pkg] ?? `services/${pkg}/src/index.ts`;

/**
 * The rules broken when `file` (a real file of the repository, so that its package's rules and
 * its types apply) reads as its own text followed by `extra`.
 */
async function broken(file: string, extra: string): Promise<string[]> {
  const text = `${readFileSync(join(ROOT, file), 'utf8')}\n${extra}\n`;
  const [result] = await eslint.lintText(text, { filePath: join(ROOT, file) });
  return result!.messages.map((m) => `${m.ruleId ?? 'parse'}: ${m.message}`);
}

describe('the lint configuration', () => {
  it('passes the files as they are', async () => {
    for (const file of Object.keys(layers).map(fileOf)) {
      expect(await broken(file, ''), file).toEqual([]);
    }
  }, 120_000);

  it('refuses, in every package, an import of each package the graph does not give it', async () => {
    expect(Object.keys(layers).sort()).toEqual(
      [
        ...Object.keys(FILE_OF),
        'api',
        'scheduler',
        'builder',
        'worker',
        'watchdog',
        'projector',
        'gateway',
      ].sort(),
    );
    for (const pkg of Object.keys(layers)) {
      const forbidden = forbiddenFor(pkg);
      expect(forbidden.length, pkg).toBeGreaterThan(0);
      const extra = forbidden.map((p, i) => `export * as forbidden${i} from '${p}';`).join('\n');
      const rules = (await broken(fileOf(pkg), extra)).join('\n');
      for (const p of forbidden) {
        expect(rules, `${pkg} importing ${p}`).toMatch(
          new RegExp(`no-restricted-imports: '${p}' import is restricted`),
        );
      }
    }
    const deep = await broken(
      'services/api/src/deps.ts',
      "export * as kit from '@trainyard/service-kit/src/ids.ts';",
    );
    expect(deep.join('\n')).toMatch(/no-restricted-imports/);
    const impure = await broken(
      'packages/domain/src/worker.ts',
      "export { createHash } from 'node:crypto';",
    );
    expect(impure.join('\n')).toMatch(/no-restricted-imports/);
    const serverSide = await broken(
      fileOf('cli'),
      serverLibraries
        .map((l, i) => `export * as lib${i} from '${l.replace('*', 'kv')}';`)
        .join('\n'),
    );
    for (const lib of serverLibraries) {
      expect(serverSide.join('\n'), `cli importing ${lib}`).toContain(
        `'${lib.replace('*', 'kv')}' import is restricted`,
      );
    }
  }, 180_000);

  it('refuses a promise nobody awaits', async () => {
    const rules = await broken(
      'packages/application/src/commands.ts',
      'export function forget(store: EventStore): void {\n  store.lastSeq();\n}',
    );
    expect(rules.join('\n')).toMatch(/no-floating-promises/);
    const marked = await broken(
      'packages/application/src/commands.ts',
      'export function forget(store: EventStore): void {\n  void store.lastSeq();\n}',
    );
    expect(marked).toEqual([]);
  }, 120_000);

  it('refuses an import cycle', async () => {
    // store.ts imports hash.ts: hash.ts importing store.ts closes a cycle.
    const rules = await broken(
      'packages/events/src/hash.ts',
      "import { EventStore } from './store.ts';\nexport const storeClass = EventStore;",
    );
    expect(rules.join('\n')).toMatch(/import-x\/no-cycle/);
  }, 120_000);
});
