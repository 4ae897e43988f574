import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { parseSshPublicKey, SshKeyProblem } from '../src/ssh-keys.ts';

/** Made by `ssh-keygen -t ed25519 -C alice@laptop`; the fingerprints are what `ssh-keygen -lf` printed. */
const ED25519 =
  'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO3u7MfB9EHtiO1tODSZOFDcBwcFwgfuwm2a1rbHKLAJ alice@laptop';
const ED25519_FINGERPRINT = 'SHA256:pYOwIy/BzzvEBH6m40Kq1bgI648E0YVi/bLeWcR7r/8';
const ECDSA_384 =
  'ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBDdpYg6BerEudk14qzqDFRE0TGG2bqvqBMGI6Ct9ZxcX0EhRu8V6UUlHuU7Iya1iAs0bZTY1MwxC9q6JoSZWAgt0CU5bs/i+BKajANHfLYAF4GmoiXVoZRvboRbHOAt45g== ec';
const ECDSA_384_FINGERPRINT = 'SHA256:Z/dlNCEsh7iaeYJ7IiekfDComdsoBhPe7x1QbIbCA8A';
const RSA_2048 =
  'ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQDJkX8unU/zekF/6tTR/BM+ni4PPOBaqAgxSz8lSJgg4PxGSoKSTH/mQqo5KnCy+eOhcK15Xlaf1gEhDXYvrJ10PhFlS6js+HI4eBpMWKGsPNIZR+Q9SRgkSAsjHEQhfxfgE6TnRgo5OivbPH6TMkzgudd29WY+ZYSn7JpUmCeVXowjbIMNyESEPtlMBxnqMjDA72bXpcDk6Yyt9VwG6YixX+tM2/T5f4dzWirTH1gdZ2Q53Ow/HL17mNG+8suje4m7yH7dtW9c3Wxk+GEe6rQMU/QGJ9XhRJWn3NSOI8RdXoUAHJlkMr3swerpYzhButr/PJUohaWKLSoJrBCAirwT big';
const RSA_2048_FINGERPRINT = 'SHA256:bJMTrsK46eNrIqN8YB5t5QW7aAArF3JBu2pslwPm2iE';
/** `ssh-keygen -t rsa -b 1024`: too short. */
const RSA_1024 =
  'ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQCYD5it9BtHmykmz+u4P7Ipcgit8Os+II62NI5LwAPAtmY2kQ5lPx9XD5J81veQ63pB03yihiamX1Gg2oHF7bUdPQndx3ULHQZ6Y3RSp4NJqzvO/F7Cxpy9dOxKQn9Xm/sosfVC6Pdf5ZuVx0Ks5lVVGB/MVSmtdP9/rJ3p9iPWSw== small';

/** One SSH string: its 32-bit length, then its bytes. */
function sshString(bytes: Buffer | string): Buffer {
  const body = typeof bytes === 'string' ? Buffer.from(bytes) : bytes;
  const length = Buffer.alloc(4);
  length.writeUInt32BE(body.length);
  return Buffer.concat([length, body]);
}

const line = (type: string, ...parts: Buffer[]) =>
  `${type} ${Buffer.concat([sshString(type), ...parts]).toString('base64')}`;

function ecdsaLine(curve: 'P-256' | 'P-521'): string {
  const { publicKey } = generateKeyPairSync('ec', { namedCurve: curve });
  const jwk = publicKey.export({ format: 'jwk' });
  const name = curve === 'P-256' ? 'nistp256' : 'nistp521';
  const point = Buffer.concat([
    Buffer.from([4]),
    Buffer.from(jwk.x!, 'base64url'),
    Buffer.from(jwk.y!, 'base64url'),
  ]);
  return line(`ecdsa-sha2-${name}`, sshString(name), sshString(point));
}

const problem = (text: string) => {
  try {
    parseSshPublicKey(text);
  } catch (err) {
    expect(err).toBeInstanceOf(SshKeyProblem);
    return (err as Error).message;
  }
  throw new Error(`accepted: ${text}`);
};

describe('parseSshPublicKey', () => {
  it('reads an ed25519 key as ssh-keygen does: its fingerprint, its comment, no comment kept in the line', () => {
    const key = parseSshPublicKey(`  ${ED25519}\n`);
    expect(key.fingerprint).toBe(ED25519_FINGERPRINT);
    expect(key.type).toBe('ssh-ed25519');
    expect(key.comment).toBe('alice@laptop');
    expect(key.line).toBe(ED25519.replace(' alice@laptop', ''));
    expect(key.bits).toBe(256);
  });

  it('reads ECDSA keys on each NIST curve', () => {
    const p384 = parseSshPublicKey(ECDSA_384);
    expect(p384).toMatchObject({ fingerprint: ECDSA_384_FINGERPRINT, bits: 384, comment: 'ec' });
    expect(parseSshPublicKey(ecdsaLine('P-256'))).toMatchObject({ bits: 256, comment: '' });
    expect(parseSshPublicKey(ecdsaLine('P-521')).type).toBe('ecdsa-sha2-nistp521');
  });

  it('takes RSA keys of 2048 bits and more, and refuses shorter ones', () => {
    expect(parseSshPublicKey(RSA_2048)).toMatchObject({
      fingerprint: RSA_2048_FINGERPRINT,
      bits: 2048,
      comment: 'big',
    });
    expect(problem(RSA_1024)).toContain('RSA key of 1024 bits is too short: at least 2048');
  });

  it('refuses a line whose type is not the type inside the key', () => {
    const inside = ED25519.split(' ')[1]!;
    expect(problem(`ssh-rsa ${inside}`)).toContain(
      'the line says ssh-rsa, but the key inside is ssh-ed25519',
    );
    expect(problem(ECDSA_384.replace('nistp384', 'nistp256'))).toContain(
      'the key inside is ecdsa-sha2-nistp384',
    );
  });

  it('refuses garbage, other key types, cut keys and extra bytes, saying why', () => {
    expect(problem('')).toContain('not an OpenSSH public key line');
    expect(problem('hello world')).toContain('not an OpenSSH public key line');
    expect(problem('-----BEGIN OPENSSH PRIVATE KEY-----')).toContain('not an OpenSSH public key');
    expect(problem('ssh-ed25519 !!!notbase64!!!')).toContain('not base64');
    expect(problem('ssh-dss AAAAB3NzaC1kc3M=')).toContain('ssh-dss keys are not accepted');
    expect(problem('sk-ssh-ed25519@openssh.com AAAA')).toContain('are not accepted');
    expect(problem(line('ssh-ed25519', sshString(Buffer.alloc(31))))).toContain('32 bytes');
    const blob = Buffer.from(ED25519.split(' ')[1]!, 'base64');
    expect(
      problem(`ssh-ed25519 ${blob.subarray(0, blob.length - 4).toString('base64')}`),
    ).toContain('ends inside');
    expect(
      problem(`ssh-ed25519 ${Buffer.concat([blob, Buffer.from([0])]).toString('base64')}`),
    ).toContain('holds more than its type has');
    expect(problem(`${ED25519}\n${ED25519}`)).toContain('one key, on one line');
  });
});
