export * from './archive.ts';
export * from './fetch.ts';
export * from './hashing.ts';
export * from './object-store.ts';
export * from './s3.ts';
export * from './types.ts';
