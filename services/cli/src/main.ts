import { Command, CommanderError } from 'commander';
import { registerAccountCommands } from './commands/account.ts';
import { registerAdminCommands } from './commands/admin.ts';
import { registerCompletionCommand } from './commands/completion.ts';
import { registerJobCommands } from './commands/jobs.ts';
import { registerTeamCommands } from './commands/teams.ts';
import { registerMetricsCommand } from './commands/metrics.ts';
import { registerQueueCommands } from './commands/queue.ts';
import { registerServiceJobCommands } from './commands/services.ts';
import { registerSessionCommands } from './commands/sessions.ts';
import { registerSshKeyCommands } from './commands/ssh-keys.ts';
import { registerSshCommands } from './commands/ssh.ts';
import { registerUsageCommands } from './commands/usage.ts';
import { CliError, describeError, verbose } from './errors.ts';
import { CLIENT_ONLY, loadServerCommands, standIns, type ServerCommands } from './server.ts';
import cliPackage from '../package.json' with { type: 'json' };

export type { ServerCommands } from './server.ts';
export { CLIENT_ONLY, serverNotInstalled } from './server.ts';

/**
 * The `trainyard` command: the client's commands, and the server's (`up`, the services, the
 * operators' commands) when the server side is installed beside it.
 */
export function buildProgram(server: ServerCommands): Command {
  const program = new Command('trainyard')
    .description('Trainyard: GPU training jobs and interactive sessions, scheduled on an event log')
    .version(cliPackage.version)
    .option('--api <url>', 'the API to talk to (default: your login, the local stack, or :8080)')
    .option('--profile <name>', 'which saved login to use (default: default)')
    .option('--verbose', 'on an error, show where it came from (or set TRAINYARD_DEBUG=1)')
    .showHelpAfterError('(add --help for usage)')
    .hook('preAction', (cmd) => {
      const o = cmd.opts<{ api?: string; profile?: string; verbose?: boolean }>();
      if (o.api) process.env.TRAINYARD_API_URL = o.api;
      if (o.profile) process.env.TRAINYARD_PROFILE = o.profile;
      if (o.verbose) process.env.TRAINYARD_DEBUG = '1';
    });
  server.registerServiceCommands(program);
  registerAccountCommands(program);
  registerTeamCommands(program);
  registerJobCommands(program);
  registerQueueCommands(program);
  registerMetricsCommand(program);
  registerServiceJobCommands(program);
  registerSessionCommands(program);
  registerSshCommands(program);
  registerSshKeyCommands(program);
  registerAdminCommands(program);
  registerUsageCommands(program);
  server.registerOperatorCommands(program);
  registerCompletionCommand(program);
  return program;
}

/** Commands that read the whole program, the server's commands included. */
const WHOLE_PROGRAM = new Set(['completion']);

/**
 * The top-level commands (and their aliases) that are the client's alone: the server side neither
 * makes them nor adds to them, so they run the same without it.
 */
export function clientCommands(): string[] {
  const shape = (server: ServerCommands) =>
    new Map(buildProgram(server).commands.map((c) => [c.name(), c]));
  const served = shape(standIns('', ''));
  return [...shape(CLIENT_ONLY)]
    .filter(([name]) => !WHOLE_PROGRAM.has(name))
    .filter(([name, c]) => served.get(name)?.commands.length === c.commands.length)
    .flatMap(([name, c]) => [name, ...c.aliases()]);
}

/**
 * Runs the command line. Output piped into a reader that stops early (`| head`) ends the CLI
 * quietly. A failure prints one line saying what went wrong and what to do, and
 * exits non-zero; `--verbose` (or `TRAINYARD_DEBUG=1`) adds the stack. An unexpected error ends
 * the process at once: a service that failed to start must exit (for its process manager to
 * start it again), not linger on an open connection. With `server` given, the server side is
 * not looked for.
 */
export async function main(argv: string[], server?: ServerCommands): Promise<void> {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE') process.exit(process.exitCode ?? 0);
      throw err;
    });
  }
  try {
    await buildProgram(server ?? (await loadServerCommands())).parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode;
      return;
    }
    console.error(`error: ${describeError(err)}`);
    if (verbose(argv)) console.error(err);
    if (err instanceof CliError) {
      process.exitCode = err.exitCode;
      return;
    }
    process.exit(1);
  }
}
