import js from '@eslint/js';
import { createNodeResolver, importX } from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';

const services = ['api', 'scheduler', 'builder', 'worker', 'watchdog', 'projector', 'cli'];
const servicePackages = services.map((s) => `@trainyard/${s}`);
/** The adapters, each a package of its own: see the package graph in docs/architecture.md. */
const adapters = ['blobs', 'service-kit', 'runtime', 'application', 'servers'].map(
  (p) => `@trainyard/${p}`,
);
const except = (...names) => adapters.filter((a) => !names.includes(a));

/** No reaching into another package's files: import its public index only. */
const noDeepImports = {
  group: ['@trainyard/*/*'],
  message: 'import the package by name; its src/index.ts is its public surface',
};

/**
 * The one-way rule: events <- domain <- projections, and events <- blobs <- service-kit <-
 * runtime / application <- servers; services stand on all of them but the servers, which only
 * the composition root (cli) and the tests start.
 */
function restrict(files, paths, patterns = []) {
  return {
    files,
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        { paths, patterns: [noDeepImports, ...patterns] },
      ],
    },
  };
}

const banned = (names, message) => names.map((name) => ({ name, message }));

export default tseslint.config(
  { ignores: ['node_modules/**', '**/node_modules/**', '.trainyard/**', 'bench-results/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: 'readonly', console: 'readonly', Buffer: 'readonly' } },
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' },
      ],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      'no-console': 'off',
    },
  },
  {
    // A promise nobody awaits loses its error; an import cycle makes load order matter.
    files: ['**/*.ts'],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    plugins: { 'import-x': importX },
    settings: {
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import-x/resolver-next': [createNodeResolver({ extensions: ['.ts', '.js'] })],
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      'import-x/no-cycle': ['error', { ignoreExternal: true }],
    },
  },
  restrict(
    ['packages/events/src/**'],
    banned(
      ['@trainyard/domain', '@trainyard/projections', ...adapters, ...servicePackages],
      'events is the bottom layer',
    ),
  ),
  {
    files: ['packages/domain/src/**'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: [
            {
              name: '@trainyard/events',
              message: 'the domain takes types only from events',
              allowTypeImports: true,
            },
            ...banned(
              ['@trainyard/projections', ...adapters, ...servicePackages],
              'the domain imports nothing but event types',
            ),
          ],
          patterns: [
            noDeepImports,
            {
              group: ['node:*', '@nats-io/*', 'kysely', 'postgres', 'fastify', 'zod'],
              message: 'the domain is pure: no IO, no libraries',
            },
          ],
        },
      ],
      'no-restricted-globals': [
        'error',
        { name: 'fetch', message: 'the domain is pure' },
        { name: 'setTimeout', message: 'the domain has no clock' },
      ],
      'no-restricted-syntax': [
        'error',
        {
          selector: "CallExpression[callee.object.name='Date'][callee.property.name='now']",
          message: 'time arrives in the command',
        },
        {
          selector: "CallExpression[callee.object.name='Math'][callee.property.name='random']",
          message: 'randomness arrives in the command',
        },
        {
          selector: "NewExpression[callee.name='Date'][arguments.length=0]",
          message: 'time arrives in the command',
        },
      ],
    },
  },
  restrict(
    ['packages/projections/src/**'],
    banned(
      ['@trainyard/testkit', ...adapters, ...servicePackages],
      'projections fold events into tables, and stand on events and the domain alone',
    ),
  ),
  restrict(
    ['packages/blobs/src/**'],
    banned(
      [
        '@trainyard/domain',
        '@trainyard/projections',
        '@trainyard/testkit',
        ...except(),
        ...servicePackages,
      ],
      'blob storage and archives stand on events alone',
    ),
  ),
  restrict(
    ['packages/service-kit/src/**'],
    banned(
      [
        '@trainyard/domain',
        '@trainyard/projections',
        '@trainyard/testkit',
        ...except('@trainyard/blobs'),
        ...servicePackages,
      ],
      'the service kit is plumbing: it knows no domain and no application',
    ),
  ),
  restrict(
    ['packages/runtime/src/**'],
    banned(
      [
        '@trainyard/projections',
        '@trainyard/testkit',
        ...except('@trainyard/blobs', '@trainyard/service-kit'),
        ...servicePackages,
      ],
      'the host runtime runs processes and ships their logs; it decides nothing',
    ),
  ),
  restrict(
    ['packages/application/src/**'],
    banned(
      [
        '@trainyard/projections',
        '@trainyard/testkit',
        ...except('@trainyard/blobs', '@trainyard/service-kit'),
        ...servicePackages,
      ],
      'the application layer runs the deciders; it starts no server and runs no process',
    ),
  ),
  restrict(
    ['packages/servers/src/**'],
    banned(
      ['@trainyard/projections', '@trainyard/testkit', '@trainyard/runtime', ...servicePackages],
      'the embedded servers serve the composition root and the tests',
    ),
  ),
  ...services
    .filter((s) => s !== 'cli')
    .map((s) =>
      restrict(
        [`services/${s}/src/**`],
        [
          ...banned(
            servicePackages.filter((p) => p !== `@trainyard/${s}`),
            'services never import each other; they share events',
          ),
          ...banned(['@trainyard/servers'], 'only the composition root (cli) starts servers'),
        ],
      ),
    ),
  {
    files: ['**/*.test.ts', 'scripts/**', 'bench/**'],
    rules: { '@typescript-eslint/no-non-null-assertion': 'off' },
  },
);
