import type { JetStreamClient, PubAck } from '@nats-io/jetstream';

const ATTEMPTS = 8;

/**
 * Publishes to a stream with a msg id, trying again (bounded, with backoff) while the answer is
 * lost, for example while a cluster elects a new leader. The msg id makes a repeat harmless.
 */
export async function publishReliably(
  js: JetStreamClient,
  subject: string,
  data: string | Uint8Array,
  msgID: string,
): Promise<PubAck> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await js.publish(subject, data, { msgID, timeout: 5_000 });
    } catch (err) {
      if (attempt >= ATTEMPTS) throw err;
      await new Promise((r) => setTimeout(r, Math.min(2_000, 100 * 2 ** attempt)));
    }
  }
}
