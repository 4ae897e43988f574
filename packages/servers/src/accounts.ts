import { CONTROL_SERVICES, type ControlService } from '@trainyard/service-kit';
import {
  CONTROL_ACCOUNT,
  controlExports,
  servicePermissions,
  WORKER_ACCOUNT,
  workerImports,
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

/** The account where nats-server asks the auth callout about logins it does not know. */
export const AUTH_ACCOUNT = 'AUTH';
/** An nkey user nobody can log in as (its seed was never kept): see `natsAccountsConfig`. */
const NONCE_USER = 'UCJQFF7RLCZPW3N2TST2CMYOFDYZZVD2VCVMEIIQ6E4SPQBLCSQEFCA3';
/** The logins of accounts.conf that carry a password of their own. */
const FIXED_LOGINS = ['control', ...CONTROL_SERVICES];

/** A list in nats-server's config, indented to sit in an account. */
const list = (items: unknown[]) => JSON.stringify(items, null, 2).replace(/\n/g, '\n    ');

/**
 * `infra/nats/accounts.conf`, made from the permissions the embedded stack gives: `npm run
 * nats:accounts` writes it, and a test holds the file to it.
 */
export function natsAccountsConfig(): string {
  return `# Accounts and permissions, written by \`npm run nats:accounts\` from packages/servers (a test
# holds this file to it): edit the permissions there, not here.
#
# The control plane's logins are in the ${CONTROL_ACCOUNT} account, with the streams and buckets:
# - control makes the streams and buckets (\`trainyard nats setup\`) and serves operators;
# - each control-plane service has a login of its own (servicePermissions): none may take the
#   streams apart or read another's replies, and only the api reads the secret buckets.
# Workers are in the ${WORKER_ACCOUNT} account, which holds no stream and imports from ${CONTROL_ACCOUNT}
# only the services a worker uses (WORKER_IMPORTS): what the server sends on a worker's behalf,
# the answer to a JetStream call included, stays in ${WORKER_ACCOUNT}. It has no login of its own:
# each worker enrols (\`trainyard worker --token\`) and logs in with its own key. nats-server
# asks the control plane's auth callout (\`trainyard nats auth\`, as the auth login in ${AUTH_ACCOUNT})
# about it, which lets a key in only while it is enrolled, into ${WORKER_ACCOUNT} with that worker's
# own permissions (workerPermissions): heartbeat, report and take work as itself, ship its own
# logs and write its own bucket; no events, no secrets, no dispatching, no other worker's work.
# It closes a worker's connections when it is revoked. The answers are signed with the account
# nkey whose public half is TRAINYARD_AUTH_ISSUER. The fixed logins skip the callout.
# nats-server 2.10 sends clients a nonce to sign only when it knows an nkey user: the one in
# ${AUTH_ACCOUNT} is that, and nobody holds its seed.
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
    imports: ${list(workerImports())}
  }
  ${AUTH_ACCOUNT} {
    users: [
      { user: auth, password: $TRAINYARD_AUTH_NATS_PASSWORD }
      { nkey: ${NONCE_USER} }
    ]
  }
  SYS { users: [ { user: sys, password: $TRAINYARD_SYS_PASSWORD } ] }
}
system_account: SYS
authorization {
  auth_callout {
    issuer: $TRAINYARD_AUTH_ISSUER
    account: ${AUTH_ACCOUNT}
    auth_users: [ ${[...FIXED_LOGINS, 'auth', 'sys'].join(', ')} ]
  }
}
`;
}
