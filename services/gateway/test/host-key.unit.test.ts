import ssh2 from 'ssh2';
import { describe, expect, it } from 'vitest';
import { newHostKey, usableHostKey } from '../src/host-key.ts';

/** A key pair as ssh2's generator makes one about once in 256: its public key a byte short. */
function shortened(): { private: string; public: string } {
  const made = ssh2.utils.generateKeyPairSync('ed25519');
  const [type, blob] = made.public.split(' ');
  const bytes = Buffer.from(blob!, 'base64');
  // The key's length field says 32; one byte fewer follows.
  return { private: made.private, public: `${type} ${bytes.subarray(0, -1).toString('base64')}` };
}

/** A key pair ssh2 can parse: its generator itself makes a short one about once in 256. */
function parseable(): { private: string; public: string } {
  for (;;) {
    const made = ssh2.utils.generateKeyPairSync('ed25519');
    if (usableHostKey({ privateKey: made.private, publicKey: made.public })) return made;
  }
}

describe('the gateway host key', () => {
  it('is made again when ssh2 made one it cannot parse', () => {
    let calls = 0;
    const good = parseable();
    const key = newHostKey(() => (++calls === 1 ? shortened() : good));
    expect(calls).toBe(2);
    expect(usableHostKey(key)).toBe(true);
    expect(key.fingerprint).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
  });

  it('tells a stored key ssh2 can use from one it cannot', () => {
    const bad = shortened();
    expect(usableHostKey({ privateKey: bad.private, publicKey: bad.public })).toBe(false);
    expect(usableHostKey({ privateKey: 'garbage', publicKey: 'ssh-ed25519 AAAA' })).toBe(false);
    expect(usableHostKey({})).toBe(false);
    for (let i = 0; i < 50; i++) expect(usableHostKey(newHostKey())).toBe(true);
  });

  it('gives up, saying so, when no key it makes parses', () => {
    expect(() => newHostKey(shortened)).toThrow('could not make an SSH host key that parses');
  });
});
