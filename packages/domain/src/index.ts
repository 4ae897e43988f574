export * from './backoff.ts';
export * from './cluster.ts';
export * from './errors.ts';
export * from './failures.ts';
export * from './job/decide.ts';
export * from './job/state.ts';
export * from './placement.ts';
export * from './worker.ts';
