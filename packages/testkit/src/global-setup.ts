import type {} from 'vitest';
import type { TestProject } from 'vitest/node';
import { startPostgres } from '@trainyard/servers';
import { tempDir } from './tmp.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    pgUrl: string;
  }
}

/** One real PostgreSQL for the whole run; each test file makes a database of its own on it. */
export default async function setup(project: TestProject) {
  const dir = await tempDir('trainyard-pg-');
  const pg = await startPostgres({ dir: dir.path, fast: true });
  project.provide('pgUrl', pg.url);
  return async () => {
    await pg.stop();
    await dir.remove();
  };
}
