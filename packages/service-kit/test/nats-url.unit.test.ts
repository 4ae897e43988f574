import { describe, expect, it } from 'vitest';
import { natsUrlWithoutLogin } from '../src/nats.ts';

describe('natsUrlWithoutLogin', () => {
  it('takes out a user and password, a token, and a password holding / or @', () => {
    expect(
      natsUrlWithoutLogin(
        'nats://control:s3cr/et@10.0.0.1:4222, nats://just-a-token@h2:4222,tls://u:p@ss@h3:4443',
      ),
    ).toBe('nats://10.0.0.1:4222,nats://h2:4222,tls://h3:4443');
  });

  it('leaves a URL without a login as it is', () => {
    expect(natsUrlWithoutLogin('nats://127.0.0.1:4223')).toBe('nats://127.0.0.1:4223');
  });
});
