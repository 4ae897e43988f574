/**
 * What the API and the SSH gateway share through KV: the one-time passwords the API hands out
 * for sessions (only their hashes), and the gateway's host key, which the API gives clients to
 * pin. Both buckets hold secrets: only those two services may read them.
 */

/** The bucket of one-time SSH passwords, one per session, keyed by session id. */
export const SSH_PASSWORDS_BUCKET = 'ty_ssh_passwords';
/** The bucket the SSH gateway keeps its host key in, under `HOST_KEY`. */
export const GATEWAY_BUCKET = 'ty_gateway';
export const HOST_KEY = 'hostKey';

/**
 * A one-time password as the gateway finds it: only its hash, the run it lets into, whose
 * session it is, and when it stops working. The gateway deletes it once used.
 */
export interface StoredSshPassword {
  /** Hex sha256 of the password. */
  sha256: string;
  expiresAt: string;
  runId: string;
  owner: string;
}

/** The gateway's host key, as it writes it on its first start. */
export interface StoredHostKey {
  privateKey: string;
  /** An OpenSSH public key line. */
  publicKey: string;
  /** `SHA256:…`, as `ssh-keygen -l` prints it. */
  fingerprint: string;
}
