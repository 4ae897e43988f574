import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import { retry } from '@trainyard/events';

const ATTEMPTS = 8;

/**
 * Publishes to a stream with a msg id, trying again (bounded, with backoff) while the answer is
 * lost, for example while a cluster elects a new leader. The msg id makes a repeat harmless.
 */
export function publishReliably(
  js: JetStreamClient,
  subject: string,
  data: string | Uint8Array,
  msgID: string,
): Promise<PubAck> {
  return retry(() => js.publish(subject, data, { msgID, timeout: 5_000 }), { attempts: ATTEMPTS });
}
