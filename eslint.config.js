import js from '@eslint/js';
import { createNodeResolver, importX } from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';

const services = ['api', 'scheduler', 'builder', 'worker', 'watchdog', 'projector', 'cli'];
const servicePackages = services.map((s) => `@trainyard/${s}`);

/** No reaching into another package's files: import its public index only. */
const noDeepImports = {
  group: ['@trainyard/*/*'],
  message: 'import the package by name; its src/index.ts is its public surface',
};

/** The one-way rule: events <- domain <- projections/platform <- services. */
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
      ['@trainyard/domain', '@trainyard/projections', '@trainyard/platform', ...servicePackages],
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
              ['@trainyard/projections', '@trainyard/platform', ...servicePackages],
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
    ['packages/projections/src/**', 'packages/platform/src/**'],
    banned(['@trainyard/testkit', ...servicePackages], 'adapters never import services'),
  ),
  ...services
    .filter((s) => s !== 'cli')
    .map((s) =>
      restrict(
        [`services/${s}/src/**`],
        banned(
          servicePackages.filter((p) => p !== `@trainyard/${s}`),
          'services never import each other; they share events',
        ),
      ),
    ),
  {
    files: ['**/*.test.ts', 'scripts/**', 'bench/**'],
    rules: { '@typescript-eslint/no-non-null-assertion': 'off' },
  },
);
