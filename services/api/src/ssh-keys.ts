import { createHash } from 'node:crypto';

/**
 * OpenSSH public keys, read without a library: the blob is a sequence of SSH strings (a 32-bit
 * big-endian length, then that many bytes), the first naming the key's type (RFC 4253 §6.6,
 * RFC 5656 §3.1, RFC 8709 §4).
 */

/** A public key line that was read and found usable. */
export interface SshPublicKey {
  type: string;
  /** Type and base64, as an `authorized_keys` line has them, without a comment. */
  line: string;
  /** What followed the base64 on the line, if anything. */
  comment: string;
  /** `SHA256:` and the unpadded base64 of the blob's sha256, as `ssh-keygen -l` prints it. */
  fingerprint: string;
  /** The key's size: the modulus of an RSA key, the curve of the others. */
  bits: number;
}

/** The least RSA modulus taken: shorter keys are within reach of factoring. */
export const MIN_RSA_BITS = 2048;
const MAX_RSA_BITS = 16_384;

/** The key types accepted, and the size of each fixed-size one. */
const ECDSA_CURVES: Record<string, { curve: string; pointBytes: number; bits: number }> = {
  'ecdsa-sha2-nistp256': { curve: 'nistp256', pointBytes: 65, bits: 256 },
  'ecdsa-sha2-nistp384': { curve: 'nistp384', pointBytes: 97, bits: 384 },
  'ecdsa-sha2-nistp521': { curve: 'nistp521', pointBytes: 133, bits: 521 },
};
const ACCEPTED = ['ssh-ed25519', ...Object.keys(ECDSA_CURVES), 'ssh-rsa'];

/** Why a key line was refused, in words for the person who pasted it. */
export class SshKeyProblem extends Error {
  override name = 'SshKeyProblem';
}

/** Reads SSH strings from a blob, one after another. */
class Reader {
  #at = 0;
  constructor(private readonly blob: Buffer) {}

  string(what: string): Buffer {
    if (this.#at + 4 > this.blob.length) throw new SshKeyProblem(`the key ends before its ${what}`);
    const length = this.blob.readUInt32BE(this.#at);
    const start = this.#at + 4;
    if (start + length > this.blob.length)
      throw new SshKeyProblem(`the key ends inside its ${what}`);
    this.#at = start + length;
    return this.blob.subarray(start, start + length);
  }

  end(): void {
    if (this.#at !== this.blob.length)
      throw new SshKeyProblem('the key holds more than its type has');
  }
}

/** The bit length of an unsigned big-endian integer (an SSH mpint, leading zeros skipped). */
function bitLength(mpint: Buffer): number {
  let i = 0;
  while (i < mpint.length && mpint[i] === 0) i++;
  if (i === mpint.length) return 0;
  return (mpint.length - i - 1) * 8 + (32 - Math.clz32(mpint[i]!));
}

function keySize(type: string, reader: Reader): number {
  if (type === 'ssh-ed25519') {
    if (reader.string('public key').length !== 32)
      throw new SshKeyProblem('an ed25519 public key is 32 bytes');
    return 256;
  }
  const ecdsa = ECDSA_CURVES[type];
  if (ecdsa) {
    const curve = reader.string('curve name').toString('latin1');
    if (curve !== ecdsa.curve)
      throw new SshKeyProblem(`a ${type} key names curve ${ecdsa.curve}, not "${curve}"`);
    const point = reader.string('public point');
    if (point.length !== ecdsa.pointBytes || point[0] !== 4)
      throw new SshKeyProblem(`the ${ecdsa.curve} point is not an uncompressed point`);
    return ecdsa.bits;
  }
  const e = reader.string('public exponent');
  const n = reader.string('modulus');
  const eBits = bitLength(e);
  if (eBits < 2 || (e[e.length - 1]! & 1) === 0 || eBits > 64)
    throw new SshKeyProblem('the RSA public exponent is not a usable one');
  const bits = bitLength(n);
  if (bits < MIN_RSA_BITS) {
    throw new SshKeyProblem(
      `an RSA key of ${bits} bits is too short: at least ${MIN_RSA_BITS} (ssh-keygen -t ed25519 makes a better one)`,
    );
  }
  if (bits > MAX_RSA_BITS) throw new SshKeyProblem(`RSA keys of at most ${MAX_RSA_BITS} bits`);
  return bits;
}

/**
 * Reads an OpenSSH public key line (`TYPE BASE64 [COMMENT]`, as in a `.pub` file) and checks
 * it: ed25519, ECDSA on the NIST curves, or RSA of at least 2048 bits. Throws `SshKeyProblem`.
 *
 * @example parseSshPublicKey(readFileSync('~/.ssh/id_ed25519.pub', 'utf8')).fingerprint
 */
export function parseSshPublicKey(text: string): SshPublicKey {
  const trimmed = text.trim();
  if (/[\r\n]/.test(trimmed))
    throw new SshKeyProblem('one key, on one line: TYPE BASE64 [COMMENT]');
  const [type = '', base64 = '', ...rest] = trimmed.split(/[ \t]+/);
  if (!ACCEPTED.includes(type)) {
    const known = /^(ssh-|ecdsa-|sk-)/.test(type);
    throw new SshKeyProblem(
      known
        ? `${type} keys are not accepted: use ${ACCEPTED.join(', ')}`
        : `not an OpenSSH public key line (TYPE BASE64 [COMMENT], as in ~/.ssh/id_ed25519.pub); the types accepted are ${ACCEPTED.join(', ')}`,
    );
  }
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(base64) || base64.length % 4 !== 0)
    throw new SshKeyProblem('the key after its type is not base64');
  const blob = Buffer.from(base64, 'base64');
  const reader = new Reader(blob);
  const named = reader.string('type').toString('latin1');
  if (named !== type)
    throw new SshKeyProblem(`the line says ${type}, but the key inside is ${named || 'unnamed'}`);
  const bits = keySize(type, reader);
  reader.end();
  const digest = createHash('sha256').update(blob).digest('base64').replace(/=+$/, '');
  return {
    type,
    line: `${type} ${blob.toString('base64')}`,
    comment: rest.join(' '),
    fingerprint: `SHA256:${digest}`,
    bits,
  };
}
