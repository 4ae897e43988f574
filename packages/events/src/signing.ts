import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  sign,
  verify,
  type KeyObject,
} from 'node:crypto';

/**
 * Signed events. Every event carries the signature of the identity that appended it: an Ed25519
 * signature over its hash, which already covers its content and its place in the chain. A
 * verifier that knows the public keys it trusts tells an event that is unsigned, signed by a key
 * it does not know, or whose signature does not match, from a good one.
 */

/** An event's signature: the signing key's id and the signature of the event's hash. */
export interface EventSignature {
  /** The first 16 hex digits of the sha256 of the public key (SPKI DER). */
  key: string;
  /** Base64 Ed25519 signature of the event's hash (hex, as text). */
  sig: string;
}

const keyIdOf = (publicKey: KeyObject) =>
  createHash('sha256')
    .update(publicKey.export({ type: 'spki', format: 'der' }))
    .digest('hex')
    .slice(0, 16);

/** An identity's signing key. */
export class EventSigner {
  readonly keyId: string;
  /** The public key, base64 SPKI DER: what a verifier is told to trust. */
  readonly publicKey: string;

  private constructor(private readonly key: KeyObject) {
    const pub = createPublicKey(key);
    this.keyId = keyIdOf(pub);
    this.publicKey = pub.export({ type: 'spki', format: 'der' }).toString('base64');
  }

  /** A new key. */
  static generate(): EventSigner {
    return new EventSigner(generateKeyPairSync('ed25519').privateKey);
  }

  /** A key kept as base64 PKCS#8 DER (`TRAINYARD_SIGNING_KEY`, or a secrets file). */
  static fromPrivateKey(base64: string): EventSigner {
    const key = createPrivateKey({
      key: Buffer.from(base64, 'base64'),
      format: 'der',
      type: 'pkcs8',
    });
    if (key.asymmetricKeyType !== 'ed25519') throw new Error('a signing key is an Ed25519 key');
    return new EventSigner(key);
  }

  /** The private key as base64 PKCS#8 DER, to keep. */
  exportPrivateKey(): string {
    return this.key.export({ type: 'pkcs8', format: 'der' }).toString('base64');
  }

  sign(hash: string): EventSignature {
    return { key: this.keyId, sig: sign(null, Buffer.from(hash), this.key).toString('base64') };
  }
}

/** What a verifier found of an event's signature. */
export type SignatureProblem = 'unsigned' | 'unknown-key' | 'bad-signature';

/** Checks signatures against the public keys it trusts. */
export class SignatureVerifier {
  readonly #keys = new Map<string, KeyObject>();

  /** `publicKeys`: base64 SPKI DER, as `EventSigner.publicKey` gives them. */
  constructor(publicKeys: readonly string[]) {
    for (const text of publicKeys) {
      const key = createPublicKey({
        key: Buffer.from(text, 'base64'),
        format: 'der',
        type: 'spki',
      });
      this.#keys.set(keyIdOf(key), key);
    }
  }

  get size(): number {
    return this.#keys.size;
  }

  /** Null when the event is signed by a trusted key over its hash; else what is wrong. */
  check(event: { hash: string; signature?: EventSignature }): SignatureProblem | null {
    const signature = event.signature;
    if (!signature?.key || !signature.sig) return 'unsigned';
    const key = this.#keys.get(signature.key);
    if (!key) return 'unknown-key';
    try {
      return verify(null, Buffer.from(event.hash), key, Buffer.from(signature.sig, 'base64'))
        ? null
        : 'bad-signature';
    } catch {
      return 'bad-signature';
    }
  }
}
