/**
 * What the API answers with, as the client reads it. The client installs without the server,
 * so it keeps its own copy of these shapes; `/docs/json` is the authority.
 */
export interface AttemptView {
  number: number;
  id: string;
  workerId: string;
  gpus: number[];
  /** A gang job's members of rank 1 and on. */
  members?: { workerId: string; gpus: number[] }[];
  /** A service's ports on its worker. */
  ports?: number[];
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
  /** Seconds an attempt may run, where the job declares a limit. */
  timeLimit?: number | null;
  preemptible?: boolean;
  /** An array job's shard count and how many shards stand in each status; a shard's place. */
  shards?: number | null;
  shardStatuses?: Record<string, number>;
  shardOf?: { jobId: string; index: number } | null;
  /** A gang job's worker count. */
  nodes?: number | null;
  /** `service`: it runs until stopped. */
  kind?: string;
  health?: { http?: string; command?: string } | null;
  /** Where it stands in the queue while it waits, and why it waits (`trainyard why`). */
  queuePosition?: number | null;
  pendingReason?: string | null;
  pendingMessage?: string | null;
  /** Jobs that must succeed first, and whether they all have. */
  dependsOn?: string[];
  dependenciesMet?: boolean;
  /** The team its GPUs are charged to. */
  team?: string | null;
  /** Who holds it, and why, while it is held. */
  held?: { by: 'owner' | 'admin'; reason: string } | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  exitCode: number | null;
  failure: { kind: string; reason: string; message: string } | null;
  attemptCount: number;
  seq: number;
  attempts?: AttemptView[];
}

export interface SessionView {
  id: string;
  /** Why it waits, while it waits for a place. */
  pendingReason?: string | null;
  pendingMessage?: string | null;
  name: string | null;
  owner: string;
  status: string;
  resources: { gpus: number; vramGb?: number; cpus?: number; memoryGb?: number; gpuModel?: string };
  fromJob: string | null;
  image: string | null;
  imageDigest: string | null;
  timers: { connectMin: number; idleMin: number; maxMin: number };
  workerId: string | null;
  runs: number;
  gpus: number[];
  active: boolean;
  stopReason: string | null;
  failure: { kind: string; reason: string; message: string } | null;
  requeuedBecause: string | null;
  requestedAt: string;
  startedAt: string | null;
  connectedAt: string | null;
  lastLoginAt: string | null;
  endedAt: string | null;
  stopsAt: string | null;
  seq: number;
}

/** Where and how to reach a running session: `POST /v1/sessions/:id/connect`. */
export interface SessionConnect {
  host: string;
  port: number;
  username: string;
  password: string;
  expiresAt: string;
  hostKey: string;
  hostKeyFingerprint: string;
}

export interface SshKeyView {
  fingerprint: string;
  type: string;
  publicKey: string;
  name: string;
  addedAt: string;
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
