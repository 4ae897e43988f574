import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
let eslint: ESLint;

beforeAll(() => {
  eslint = new ESLint({ cwd: ROOT });
});

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
    for (const file of [
      'packages/events/src/hash.ts',
      'packages/domain/src/worker.ts',
      'packages/blobs/src/types.ts',
      'packages/service-kit/src/ids.ts',
      'packages/runtime/src/gpu.ts',
      'packages/application/src/commands.ts',
      'packages/servers/src/ports.ts',
      'services/watchdog/src/watchdog.ts',
    ]) {
      expect(await broken(file, ''), file).toEqual([]);
    }
  }, 120_000);

  it('refuses every arrow that points back down the layers', async () => {
    const backArrows: [file: string, extra: string][] = [
      ['packages/events/src/hash.ts', "export * as domain from '@trainyard/domain';"],
      ['packages/events/src/hash.ts', "export * as blobs from '@trainyard/blobs';"],
      ['packages/domain/src/worker.ts', "export * as kit from '@trainyard/service-kit';"],
      ['packages/domain/src/worker.ts', "export { createHash } from 'node:crypto';"],
      ['packages/projections/src/index.ts', "export * as api from '@trainyard/api';"],
      ['packages/projections/src/index.ts', "export * as kit from '@trainyard/service-kit';"],
      ['packages/blobs/src/types.ts', "export * as kit from '@trainyard/service-kit';"],
      ['packages/blobs/src/types.ts', "export * as domain from '@trainyard/domain';"],
      ['packages/service-kit/src/ids.ts', "export * as app from '@trainyard/application';"],
      ['packages/service-kit/src/ids.ts', "export * as runtime from '@trainyard/runtime';"],
      ['packages/service-kit/src/ids.ts', "export * as domain from '@trainyard/domain';"],
      ['packages/runtime/src/gpu.ts', "export * as app from '@trainyard/application';"],
      ['packages/runtime/src/gpu.ts', "export * as servers from '@trainyard/servers';"],
      ['packages/application/src/commands.ts', "export * as servers from '@trainyard/servers';"],
      ['packages/application/src/commands.ts', "export * as runtime from '@trainyard/runtime';"],
      ['packages/application/src/commands.ts', "export * as worker from '@trainyard/worker';"],
      ['packages/servers/src/ports.ts', "export * as runtime from '@trainyard/runtime';"],
      ['packages/servers/src/ports.ts', "export * as cli from '@trainyard/cli';"],
      ['services/watchdog/src/watchdog.ts', "export * as scheduler from '@trainyard/scheduler';"],
      ['services/watchdog/src/watchdog.ts', "export * as servers from '@trainyard/servers';"],
      ['services/api/src/deps.ts', "export * as kit from '@trainyard/service-kit/src/ids.ts';"],
    ];
    for (const [file, extra] of backArrows) {
      const rules = await broken(file, extra);
      expect(rules.join('\n'), `${file} + ${extra}`).toMatch(/no-restricted-imports/);
    }
  }, 120_000);

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
