import { z } from 'zod';
import { CONFLICTS } from '@trainyard/application';
import { retry, SSH_FINGERPRINT, type AggregateHead } from '@trainyard/events';
import { findSshKey, listSshKeys } from '@trainyard/projections';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { errorResponses, HIDDEN_CHARACTERS } from '../schemas.ts';
import { FingerprintParamsSchema, NewSshKeySchema, SshKeyViewSchema } from '../session-schemas.ts';
import { parseSshPublicKey, SshKeyProblem, type SshPublicKey } from '../ssh-keys.ts';
import { sshKeyView } from '../views.ts';
import { actorOf, callerOf, readModel, waitForSeq } from './common.ts';

/** The fingerprints of a user's keys, from its events, and the head they were read at. */
async function keysOf(
  deps: ApiDeps,
  username: string,
): Promise<{ keys: Set<string>; head: AggregateHead }> {
  const { events, head } = await deps.bus.store.load('user', username);
  const keys = new Set<string>();
  for (const e of events) {
    if (e.type === 'UserSshKeyAdded') keys.add(e.data.fingerprint);
    else if (e.type === 'UserSshKeyRemoved') keys.delete(e.data.fingerprint);
  }
  return { keys, head };
}

function parseKey(text: string): SshPublicKey {
  try {
    return parseSshPublicKey(text);
  } catch (err) {
    if (err instanceof SshKeyProblem)
      throw new ApiError('VALIDATION_FAILED', `publicKey: ${err.message}`);
    throw err;
  }
}

/** A key's comment as a name: on one line, nothing hidden, not too long. */
const commentAsName = (comment: string) =>
  comment.replace(new RegExp(HIDDEN_CHARACTERS, 'gu'), '').slice(0, 256);

const exists = (message: string) => new ApiError('SSH_KEY_EXISTS', message);

/**
 * The caller's SSH public keys, for logging in to their sessions through the gateway. A key is
 * registered to one user at most: the gateway finds the user by the key.
 */
export function sshKeyRoutes(app: Api, deps: ApiDeps): void {
  app.post(
    '/v1/me/ssh-keys',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Register an SSH public key for your sessions',
        description:
          'ssh-ed25519, ecdsa-sha2-nistp256/384/521, or ssh-rsa of at least 2048 bits. A key registered already (by anyone) is refused.',
        body: NewSshKeySchema,
        response: {
          201: SshKeyViewSchema.extend({ seq: z.number().int() }),
          ...errorResponses(400, 401, 409, 503, 504),
        },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const key = parseKey(req.body.publicKey);
      const name = req.body.name || commentAsName(key.comment);
      await waitForSeq(deps, await deps.bus.store.lastSeq());
      const taken = await readModel(() => findSshKey(deps.db, key.fingerprint));
      if (taken && taken.username !== caller.username)
        throw exists(`key ${key.fingerprint} is registered already, to another user`);
      const appended = await retry(async () => {
        const { keys, head } = await keysOf(deps, caller.username);
        if (keys.has(key.fingerprint))
          throw exists(`you have registered key ${key.fingerprint} already`);
        return deps.bus.store.append({
          aggregate: 'user',
          aggregateId: caller.username,
          head,
          events: [
            {
              type: 'UserSshKeyAdded',
              data: { fingerprint: key.fingerprint, publicKey: key.line, name },
            },
          ],
          meta: { actor: actorOf(caller), now: new Date(), correlationId: req.id },
        });
      }, CONFLICTS);
      const event = appended.events[0]!;
      return reply.code(201).send({
        fingerprint: key.fingerprint,
        type: key.type,
        publicKey: key.line,
        name,
        addedAt: event.occurredAt,
        seq: event.seq,
      });
    },
  );

  app.get(
    '/v1/me/ssh-keys',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Your SSH public keys, oldest first',
        response: { 200: z.array(SshKeyViewSchema), ...errorResponses(401, 503, 504) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const { seq } = await deps.bus.store.head('user', caller.username);
      if (seq > 0) await waitForSeq(deps, seq);
      const rows = await readModel(() => listSshKeys(deps.db, caller.username));
      return rows.map(sshKeyView);
    },
  );

  app.delete(
    '/v1/me/ssh-keys/:fingerprint',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Remove one of your SSH public keys',
        params: FingerprintParamsSchema,
        response: { 204: z.undefined(), ...errorResponses(401, 404, 503) },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const { fingerprint } = req.params;
      const missing = () => new ApiError('NOT_FOUND', `you have no key ${fingerprint}`);
      if (!SSH_FINGERPRINT.test(fingerprint)) throw missing();
      await retry(async () => {
        const { keys, head } = await keysOf(deps, caller.username);
        if (!keys.has(fingerprint)) throw missing();
        return deps.bus.store.append({
          aggregate: 'user',
          aggregateId: caller.username,
          head,
          events: [{ type: 'UserSshKeyRemoved', data: { fingerprint } }],
          meta: { actor: actorOf(caller), now: new Date(), correlationId: req.id },
        });
      }, CONFLICTS);
      return reply.code(204).send();
    },
  );
}
