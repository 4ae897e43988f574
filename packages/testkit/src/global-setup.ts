import type {} from 'vitest';
import type { TestProject } from 'vitest/node';
import { dockerAt, ensureLocalBaseImage } from '@trainyard/runtime';
import { startDockerEngine, startPostgres, startRegistry } from '@trainyard/servers';
import { tempDir } from './tmp.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    pgUrl: string;
  }
}

/**
 * One real PostgreSQL for the whole run; each test file makes a database of its own on it. One
 * Docker engine and one registry too, with the default base image made: the tests that need
 * them ask `testDocker()`, which says why there are none where they could not start.
 */
export default async function setup(project: TestProject) {
  const dir = await tempDir('trainyard-pg-');
  const pg = await startPostgres({ dir: dir.path, fast: true });
  project.provide('pgUrl', pg.url);
  const dockerDir = await tempDir('trainyard-docker-');
  const stops: (() => Promise<void>)[] = [];
  try {
    const engine = await startDockerEngine({ dir: `${dockerDir.path}/engine` });
    stops.push(engine.stop);
    const registry = await startRegistry({ dir: `${dockerDir.path}/registry` });
    stops.push(registry.stop);
    await ensureLocalBaseImage(dockerAt(engine.url));
    project.provide('dockerHost', engine.url);
    project.provide('registry', registry.url);
    project.provide('dockerError', '');
  } catch (err) {
    project.provide('dockerHost', '');
    project.provide('registry', '');
    project.provide('dockerError', (err as Error).message);
  }
  return async () => {
    for (const stop of stops.reverse()) await stop();
    await dockerDir.remove();
    await pg.stop();
    await dir.remove();
  };
}
