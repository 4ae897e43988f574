import js from '@eslint/js';
import { createNodeResolver, importX } from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';

/** The services: each imports the packages below, never another service nor the servers. */
const services = ['api', 'scheduler', 'builder', 'worker', 'watchdog', 'projector', 'gateway'];

/**
 * The package graph, drawn in docs/architecture.md (a test holds the drawing, this table and
 * the package.json files to one another): each package may import only those listed. `cli` is
 * the user's client and takes only `events`; `stack`, the composition root, may import anything.
 */
export const LAYERS = {
  events: [],
  domain: ['events'],
  projections: ['domain', 'events'],
  blobs: ['events'],
  tunnel: ['events'],
  'service-kit': ['blobs', 'events'],
  runtime: ['blobs', 'domain', 'events', 'tunnel'],
  application: ['service-kit', 'domain', 'events'],
  servers: ['application', 'service-kit', 'blobs', 'events'],
  testkit: ['servers', 'service-kit', 'runtime', 'events'],
  cli: ['events'],
  ...Object.fromEntries(
    services.map((s) => [
      s,
      [
        'application',
        'runtime',
        'tunnel',
        'projections',
        'service-kit',
        'blobs',
        'domain',
        'events',
      ],
    ]),
  ),
};
const everyPackage = [...Object.keys(LAYERS), 'stack'];
/** What a package may not import: every workspace package it is not given. */
export const forbiddenFor = (pkg) =>
  everyPackage.filter((p) => p !== pkg && !LAYERS[pkg].includes(p)).map((p) => `@trainyard/${p}`);
const sourcesOf = (pkg) =>
  services.includes(pkg) || pkg === 'cli' ? `services/${pkg}/src/**` : `packages/${pkg}/src/**`;

/** No reaching into another package's files: import its public index only. */
const noDeepImports = {
  group: ['@trainyard/*/*'],
  message: 'import the package by name; its src/index.ts is its public surface',
};

/** The client installs alone and talks HTTP: no library of the server's. */
export const SERVER_LIBRARIES = [
  '@nats-io/*',
  'postgres',
  'kysely',
  'fastify',
  '@fastify/*',
  'dockerode',
  'minio',
  'ssh2',
  'jose',
  'pino',
  'pino-pretty',
];
const clientOnly = {
  group: SERVER_LIBRARIES,
  message: 'the trainyard client talks to the API over HTTP and installs alone: no server library',
};

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
  {
    ignores: [
      'node_modules/**',
      '**/node_modules/**',
      '.trainyard/**',
      'bench-results/**',
      'services/cli/dist/**',
    ],
  },
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
  ...Object.keys(LAYERS)
    .filter((pkg) => pkg !== 'domain')
    .map((pkg) =>
      restrict(
        [sourcesOf(pkg)],
        banned(
          forbiddenFor(pkg),
          LAYERS[pkg].length === 0
            ? `${pkg} is the bottom layer: it imports no other package`
            : `${pkg} may import only ${LAYERS[pkg].join(', ')} (the package graph in docs/architecture.md)`,
        ),
        pkg === 'cli' ? [clientOnly] : [],
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
            ...banned(forbiddenFor('domain'), 'the domain imports nothing but event types'),
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
  {
    files: ['**/*.test.ts', 'scripts/**', 'bench/**'],
    rules: { '@typescript-eslint/no-non-null-assertion': 'off' },
  },
);
