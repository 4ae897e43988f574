import type { Msg } from '@nats-io/nats-core';
import { workerInbox } from '@trainyard/service-kit';

/** A worker id as a report or fetch subject may carry it. */
export const WORKER_ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * A report (or a fetch) is a request a client sent: from the workers' account its reply is one the server
 * maps back to the asker (`_R_.`); within the control plane's account (a login with every
 * right, or a server without accounts) it is the worker's own inbox, or any inbox. A message
 * JetStream delivered to `ty.report.<worker>` (a push consumer or a republish aimed there by
 * someone who may publish into a stream) carries no such reply subject, and is not taken for the
 * worker's word.
 */
export function askedByAClient(msg: Msg, workerId: string): boolean {
  const reply = msg.reply ?? '';
  return (
    reply.startsWith(`${workerInbox(workerId)}.`) ||
    reply.startsWith('_INBOX.') ||
    reply.startsWith('_R_.')
  );
}
