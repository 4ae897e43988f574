export * from './gpu.ts';
export * from './logship.ts';
export * from './process.ts';
export * from './simulated.ts';
export * from './types.ts';
export * from './base-image.ts';
export * from './docker.ts';
export * from './probe.ts';
