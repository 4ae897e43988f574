export * from './commands.ts';
export * from './dispatch.ts';
export * from './gateway-buckets.ts';
export * from './reports.ts';
export * from './service-buckets.ts';
export * from './sessions.ts';
export * from './worker-keys.ts';
export * from './teams.ts';
