export * from './context.ts';
export * from './servers.ts';
export * from './tmp.ts';
export * from './wait.ts';
export * from './process.ts';
export * from './cluster.ts';
export * from './fixtures.ts';
export * from './docker.ts';
