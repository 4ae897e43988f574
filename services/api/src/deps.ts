import type {
  FastifyBaseLogger,
  FastifyInstance,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Kysely } from 'kysely';
import type { Database } from '@trainyard/projections';
import type { WorkerKeys } from '@trainyard/application';
import type { ArchiveLimits, BlobStore } from '@trainyard/blobs';
import type { Bus, Logger } from '@trainyard/service-kit';
import type { CredentialStore, TokenIssuer } from './auth.ts';
import type { GatewayAccess } from './gateway.ts';
import type { HeartbeatView } from './heartbeats.ts';
import type { SessionTimerPolicy } from './session-config.ts';
import type { SessionStore } from './sessions.ts';
import type { LoginThrottle } from './throttle.ts';
import type { ApiMetrics } from './metrics.ts';

/** Everything the API needs, built by the caller (main, `trainyard up`, or a test). */
export interface ApiDeps {
  bus: Bus;
  db: Kysely<Database>;
  blobs: BlobStore;
  credentials: CredentialStore;
  sessions: SessionStore;
  throttle: LoginThrottle;
  tokens: TokenIssuer;
  /** Enrolment tokens and the keys of enrolled workers. */
  workerKeys: WorkerKeys;
  /** The NATS URL an enrolled worker is told to connect to (no login in it). */
  workerNatsUrl: string;
  log: Logger;
  metrics: ApiMetrics;
  /** Largest code archive accepted, in bytes. */
  maxUploadBytes: number;
  /** What an uploaded archive may unpack to. */
  archiveLimits: ArchiveLimits;
  /** How long `?after=<seq>` waits for the projections. */
  readYourWritesTimeoutMs: number;
  /** When each worker was last heard from. */
  heartbeats: HeartbeatView;
  /**
   * Whether jobs may run in containers (a registry is configured for their images), and the base
   * image of a job that names none then.
   */
  images: { enabled: boolean; defaultImage?: string; registry?: string };
  /**
   * Where users reach the SSH gateway. A null host is the host name the client reached the API
   * at, right wherever the gateway runs beside the API.
   */
  ssh: { host: string | null; port: number };
  /** The timers an interactive session gets when it asks for none, and the most it may ask. */
  sessionTimers: SessionTimerPolicy;
  /** One-time SSH passwords and the gateway's host key. */
  gateway: GatewayAccess;
}

/** The API's fastify instance, typed by the zod schemas its routes declare. */
export type Api = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  ZodTypeProvider
>;
