import { Command, CommanderError } from 'commander';
import { CliError } from './client.ts';
import { registerAccountCommands } from './commands/account.ts';
import { registerAdminCommands } from './commands/admin.ts';
import { registerJobCommands } from './commands/jobs.ts';
import { registerServiceCommands } from './commands/services.ts';

/** The `trainyard` command. */
export function buildProgram(): Command {
  const program = new Command('trainyard')
    .description('Trainyard: GPU training jobs, scheduled on an event log')
    .version('0.1.0')
    .showHelpAfterError();
  registerServiceCommands(program);
  registerAccountCommands(program);
  registerJobCommands(program);
  registerAdminCommands(program);
  return program;
}

/**
 * Runs the command line. An unexpected error ends the process at once: a service that failed to
 * start must exit (for its process manager to start it again), not linger on an open connection.
 */
export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode;
      return;
    }
    if (err instanceof CliError) {
      console.error(`error: ${err.message}`);
      process.exitCode = err.exitCode;
      return;
    }
    console.error(err);
    process.exit(1);
  }
}
