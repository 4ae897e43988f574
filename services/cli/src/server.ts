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

/** The server's commands, each saying that the server is not installed beside this client. */
export function serverNotInstalled(): ServerCommands {
  return standIns(NOT_INSTALLED, 'SERVER_NOT_INSTALLED');
}

const NOT_INSTALLED = `runs part of the Trainyard server, which is not installed beside this client: install ${SERVER_PACKAGE} on a host that runs it. This client talks to a running Trainyard through its API (\`trainyard login --api URL\`)`;

/** No server side: the client's own commands alone (the bundled client, see `bin/`). */
export const CLIENT_ONLY: ServerCommands = {
  registerServiceCommands: () => undefined,
  registerOperatorCommands: () => undefined,
};

/**
 * The server side's commands when it is installed, or stand-ins that say how to get it. A server
 * side that is installed but fails to load leaves the client's own commands working: its
 * commands then say why it failed.
 */
export async function loadServerCommands(): Promise<ServerCommands> {
  try {
    return (await import(SERVER_PACKAGE)) as ServerCommands;
  } catch (err) {
    const { code } = err as NodeJS.ErrnoException;
    const message = err instanceof Error ? err.message : String(err);
    if (code === 'ERR_MODULE_NOT_FOUND' && message.includes(`'${SERVER_PACKAGE}'`)) {
      return serverNotInstalled();
    }
    return standIns(
      `runs part of the Trainyard server, and ${SERVER_PACKAGE} is installed but cannot be loaded (${message.split('\n')[0]}): install it again`,
      'SERVER_BROKEN',
      err,
    );
  }
}

/** A command of the server side, which says why it cannot run here when run. */
function standIn(
  parent: Command,
  name: string,
  description: string,
  why: string,
  code: string,
  cause?: unknown,
) {
  const full = [parent.parent ? parent.name() : '', name].filter(Boolean).join(' ');
  return parent
    .command(name)
    .description(`${description} (needs ${SERVER_PACKAGE})`)
    .argument('[args...]')
    .allowUnknownOption()
    .action(() => {
      throw new CliError(`\`trainyard ${full}\` ${why}`, code, 1, { cause });
    });
}

/** The server's commands, each saying `why` it cannot run, with `code` (and `cause`, verbose). */
export function standIns(why: string, code: string, cause?: unknown): ServerCommands {
  const add = (parent: Command, name: string, description: string) =>
    standIn(parent, name, description, why, code, cause);
  return {
    registerServiceCommands(program) {
      add(program, 'up', 'run the whole stack on this machine');
      add(program, 'nats', 'the NATS side of Trainyard');
      for (const service of ['api', 'scheduler', 'builder', 'projector', 'watchdog', 'gateway']) {
        add(program, service, `run the ${service} service`);
      }
      add(program, 'worker', 'run a worker daemon on this host');
    },
    registerOperatorCommands(program) {
      const events = program.commands.find((c) => c.name() === 'events');
      if (events) add(events, 'verify', 'verify every hash chain and signature of the log');
      add(program, 'projections', 'manage the read models');
    },
  };
}
