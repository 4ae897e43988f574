import { defineConfig } from 'vitest/config';

const globalSetup = ['packages/testkit/src/global-setup.ts'];

export default defineConfig({
  test: {
    // postgres.js drops the promise of the array-types lookup a new connection makes
    // (porsager/postgres#1192): a database stopped as a connection starts rejects it where no
    // caller can catch it. `connectDb` keeps it from ending a service; here it is not an error.
    onUnhandledError: (error) => {
      const query: unknown = (error as { query?: unknown }).query;
      return !(typeof query === 'string' && query.includes('pg_catalog.pg_type'));
    },
    // One test file at a time: the end-to-end files run whole stacks, NATS clusters and chaos,
    // and on a 2-core machine running them side by side measures the machine, not Trainyard.
    fileParallelism: false,
    // Each tier's files also share one process (`isolate: false` below): the stack's modules are
    // imported once for the run, not once a file (about 200 s of the suite). A file still starts
    // and stops every server and service it uses, and leaves nothing behind for the next.
    projects: [
      {
        test: {
          name: 'unit',
          include: ['packages/*/test/**/*.unit.test.ts', 'services/*/test/**/*.unit.test.ts'],
          testTimeout: 5_000,
          isolate: false,
        },
      },
      {
        test: {
          name: 'int',
          include: [
            'packages/*/test/**/*.int.test.ts',
            'services/*/test/**/*.int.test.ts',
            'infra/test/**/*.int.test.ts',
            'scripts/test/**/*.int.test.ts',
          ],
          globalSetup,
          testTimeout: 30_000,
          hookTimeout: 30_000,
          pool: 'forks',
          isolate: false,
        },
      },
      {
        test: {
          name: 'e2e',
          include: ['services/*/test/**/*.e2e.test.ts'],
          globalSetup,
          testTimeout: 60_000,
          hookTimeout: 60_000,
          pool: 'forks',
          isolate: false,
        },
      },
    ],
  },
});
