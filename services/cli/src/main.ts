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
import { loadServerCommands, type ServerCommands } from './server.ts';

export type { ServerCommands } from './server.ts';

/**
 * The `trainyard` command: the client's commands, and the server's (`up`, the services, the
 * operators' commands) when the server side is installed beside it.
 */
export function buildProgram(server: ServerCommands): Command {
  const program = new Command('trainyard')
    .description('Trainyard: GPU training jobs and interactive sessions, scheduled on an event log')
    .version('0.1.0')
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

/**
 * Runs the command line. Output piped into a reader that stops early (`| head`) ends the CLI
 * quietly. A failure prints one line saying what went wrong and what to do, and
 * exits non-zero; `--verbose` (or `TRAINYARD_DEBUG=1`) adds the stack. An unexpected error ends
 * the process at once: a service that failed to start must exit (for its process manager to
 * start it again), not linger on an open connection.
 */
export async function main(argv: string[]): Promise<void> {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE') process.exit(process.exitCode ?? 0);
      throw err;
    });
  }
  try {
    await buildProgram(await loadServerCommands()).parseAsync(argv);
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
