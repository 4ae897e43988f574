/**
 * What the API and the SSH gateway share through KV: the one-time passwords the API hands out
 * for sessions (only their hashes), and the public half of the gateway's host key, which the
 * API gives clients to pin. The passwords are a secret of the two; the host key's private half
 * is the gateway's alone, in a bucket of its own.
 */

/** The bucket of one-time SSH passwords, one per session, keyed by session id. */
export const SSH_PASSWORDS_BUCKET = 'ty_ssh_passwords';
/** The bucket the SSH gateway keeps its host key in, under `HOST_KEY`: the gateway's alone. */
export const GATEWAY_BUCKET = 'ty_gateway';
export const HOST_KEY = 'hostKey';
/** The bucket the gateway shows its public host key in, under `HOST_KEY`, for the API. */
export const GATEWAY_PUBLIC_BUCKET = 'ty_gateway_public';

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

/** The public half of the gateway's host key, as the API reads it. */
export interface PublicHostKey {
  /** An OpenSSH public key line. */
  publicKey: string;
  /** `SHA256:…`, as `ssh-keygen -l` prints it. */
  fingerprint: string;
}

/** The gateway's host key, as it writes it on its first start. */
export interface StoredHostKey extends PublicHostKey {
  privateKey: string;
}
