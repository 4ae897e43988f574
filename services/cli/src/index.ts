export { ApiClient, CliError } from './client.ts';
export { codesOf, connectionProblem } from './errors.ts';
export {
  homeDirOf,
  readJson,
  readSigningKey,
  readStack,
  signingKeyFile,
  stackFile,
  userStackFile,
  writePrivate,
  type StackInfo,
} from './config.ts';
export { followToEnd, submitDirectory } from './commands/submit.ts';
export { printJson } from './commands/table.ts';
export { buildProgram, main, type ServerCommands } from './main.ts';
export { standIns } from './server.ts';
