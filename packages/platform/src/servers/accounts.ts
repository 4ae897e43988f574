import {
  CONTROL_ACCOUNT,
  controlExports,
  CONTROL_SERVICES,
  servicePermissions,
  WORKER_ACCOUNT,
  WORKER_PERMISSIONS,
  workerImports,
  type ControlService,
} from './permissions.ts';
import type { NatsPermissions } from './nats-server.ts';

/** The variable nats-server reads a service's password from, in `infra/nats/accounts.conf`. */
export const servicePasswordVariable = (service: ControlService) =>
  `TRAINYARD_${service.toUpperCase()}_NATS_PASSWORD`;

const user = (name: string, variable: string, permissions?: NatsPermissions) => {
  const head = `      { user: ${name}, password: $${variable}`;
  if (!permissions) return `${head} }`;
  const body = JSON.stringify(permissions, null, 2).replace(/\n/g, '\n        ');
  return `${head}\n        permissions: ${body}\n      }`;
};

/** A list in nats-server's config, indented to sit in an account. */
const list = (items: unknown[]) => JSON.stringify(items, null, 2).replace(/\n/g, '\n    ');

/**
 * `infra/nats/accounts.conf`, made from the permissions the embedded stack gives: `npm run
 * nats:accounts` writes it, and a test holds the file to it.
 */
export function natsAccountsConfig(): string {
  return `# Accounts and permissions, written by \`npm run nats:accounts\` from packages/platform (a test
# holds this file to it): edit the permissions there, not here.
#
# The control plane's logins are in the ${CONTROL_ACCOUNT} account, with the streams and buckets:
# - control makes the streams and buckets (\`trainyard nats setup\`) and serves operators;
# - each control-plane service has a login of its own (servicePermissions): none may take the
#   streams apart or read another's replies, and only the api reads the secret buckets.
# Workers are in the ${WORKER_ACCOUNT} account, which holds no stream and imports from ${CONTROL_ACCOUNT}
# only the services a worker uses (WORKER_IMPORTS): what the server sends on a worker's behalf,
# the answer to a JetStream call included, stays in ${WORKER_ACCOUNT}. They share the worker login
# (WORKER_PERMISSIONS): heartbeat, report, take work from the dispatch consumers the control
# plane made, ship logs and use the object store; no events, no secrets, no dispatching.
# \`trainyard up\` gives each enrolled worker a login of its own.
#
# The passwords come from the environment of nats-server. They must stay unquoted: nats-server
# reads \`$NAME\` as a variable only outside quotes, and "$NAME" would be the password itself.
accounts {
  ${CONTROL_ACCOUNT} {
    jetstream: enabled
    users: [
${[
  user('control', 'TRAINYARD_CONTROL_PASSWORD'),
  ...CONTROL_SERVICES.map((s) => user(s, servicePasswordVariable(s), servicePermissions(s))),
].join('\n')}
    ]
    exports: ${list(controlExports())}
  }
  ${WORKER_ACCOUNT} {
    users: [
${user('worker', 'TRAINYARD_WORKER_PASSWORD', WORKER_PERMISSIONS)}
    ]
    imports: ${list(workerImports())}
  }
  SYS { users: [ { user: sys, password: $TRAINYARD_SYS_PASSWORD } ] }
}
system_account: SYS
`;
}
