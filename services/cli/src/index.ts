export { ApiClient, CliError } from './client.ts';
export { buildProgram, main } from './main.ts';
export { EXAMPLE_DIR, startStack, type Stack, type StackOptions } from './stack.ts';
export { workerOptions } from './worker-options.ts';
