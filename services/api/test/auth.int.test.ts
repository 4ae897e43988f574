import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectBus, type Bus } from '@trainyard/service-kit';
import { startTestNats } from '@trainyard/testkit';
import { loadTokenSecret } from '../src/auth.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
const buses: Bus[] = [];
beforeAll(async () => {
  nats = await startTestNats();
  for (const name of ['api-a', 'api-b', 'api-c']) buses.push(await connectBus(nats.url, name));
});
afterAll(async () => {
  await Promise.all(buses.map((b) => b.close()));
  await nats.stop();
});

describe('the token secret', () => {
  it('is one secret for every API replica, however they race to make it', async () => {
    const secrets = await Promise.all(buses.map((b) => loadTokenSecret(b.js, undefined)));
    expect(secrets[0]).toMatch(/^[0-9a-f]{64}$/);
    expect(new Set(secrets).size).toBe(1);
    expect(await loadTokenSecret(buses[0]!.js, undefined)).toBe(secrets[0]);
  });

  it('comes from the environment when it is set there', async () => {
    expect(await loadTokenSecret(buses[0]!.js, 'from-the-environment')).toBe(
      'from-the-environment',
    );
  });
});
