/**
 * What the API answers with, as the client reads it. The client installs without the server,
 * so it keeps its own copy of these shapes; `/docs/json` is the authority.
 */
export interface AttemptView {
  number: number;
  id: string;
  workerId: string;
  gpus: number[];
  /** The attempt was the job's probe. */
  probe?: boolean;
  status: string;
  exitCode: number | null;
  failure: { kind: string; reason: string; message: string } | null;
  assignedAt: string;
  startedAt: string | null;
  finishedAt: string | null;
}

export interface JobView {
  id: string;
  name: string;
  owner: string;
  status: string;
  priority: number;
  command: string;
  /** The base image of a job that runs in a container, and the digest of the image built. */
  image?: string | null;
  imageDigest?: string | null;
  resources: { gpus: number; vramGb?: number; cpus?: number };
  /** What the job's probe measured. */
  estimate?: {
    vramBytes: number;
    ramBytes: number;
    stepMs: number | null;
    steps: number;
    device: string;
  } | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  exitCode: number | null;
  failure: { kind: string; reason: string; message: string } | null;
  attemptCount: number;
  seq: number;
  attempts?: AttemptView[];
}

/** The role a token claims, read without checking it: only to choose what to show. */
export function callerRole(token: string | null): string | null {
  const payload = token?.split('.')[1];
  if (!payload) return null;
  try {
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString()) as { role?: unknown };
    return typeof claims.role === 'string' ? claims.role : null;
  } catch {
    return null;
  }
}
