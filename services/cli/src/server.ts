import type { Command } from 'commander';
import { CliError } from './errors.ts';

/**
 * What the server side adds to the `trainyard` command. The client installs alone and talks to
 * an API over HTTP; `@trainyard/stack`, installed beside it, brings `up`, one command per
 * service and the operators' commands that read the event log and the database directly.
 */
export interface ServerCommands {
  /** `up`, `nats`, one command per service and `worker`: first in the help. */
  registerServiceCommands(program: Command): void;
  /** `events verify` and `projections rebuild`, after the client's own commands. */
  registerOperatorCommands(program: Command): void;
}

const SERVER_PACKAGE = '@trainyard/stack';

/** The server side's commands when it is installed, or stand-ins that say how to get it. */
export async function loadServerCommands(): Promise<ServerCommands> {
  try {
    return (await import(SERVER_PACKAGE)) as ServerCommands;
  } catch (err) {
    const { code, message } = err as NodeJS.ErrnoException;
    if (code === 'ERR_MODULE_NOT_FOUND' && message.includes(`'${SERVER_PACKAGE}'`)) {
      return serverNotInstalled;
    }
    throw err;
  }
}

/** A command of the server side, which says how to install it when run. */
function standIn(parent: Command, name: string, description: string): Command {
  const full = [parent.parent ? parent.name() : '', name].filter(Boolean).join(' ');
  return parent
    .command(name)
    .description(`${description} (needs ${SERVER_PACKAGE})`)
    .argument('[args...]')
    .allowUnknownOption()
    .action(() => {
      throw new CliError(
        `\`trainyard ${full}\` runs part of the Trainyard server, which is not installed beside this client: install ${SERVER_PACKAGE} on a host that runs it. This client talks to a running Trainyard through its API (\`trainyard login --api URL\`)`,
        'SERVER_NOT_INSTALLED',
      );
    });
}

const serverNotInstalled: ServerCommands = {
  registerServiceCommands(program) {
    standIn(program, 'up', 'run the whole stack on this machine');
    standIn(program, 'nats', 'the NATS side of Trainyard');
    for (const service of ['api', 'scheduler', 'builder', 'projector', 'watchdog']) {
      standIn(program, service, `run the ${service} service`);
    }
    standIn(program, 'worker', 'run a worker daemon on this host');
  },
  registerOperatorCommands(program) {
    const events = program.commands.find((c) => c.name() === 'events');
    if (events) standIn(events, 'verify', 'verify every hash chain and signature of the log');
    standIn(program, 'projections', 'manage the read models');
  },
};
