import { z } from 'zod';

/** Settings every service reads from the environment. Parsed once, at start-up. */
export const BaseConfigSchema = z.object({
  TRAINYARD_NATS_URL: z.string().default('nats://127.0.0.1:4222'),
  DATABASE_URL: z.string().optional(),
  TRAINYARD_STREAM_REPLICAS: z.coerce.number().int().min(1).max(5).default(1),
  TRAINYARD_BLOB_STORE: z.enum(['nats', 's3']).default('nats'),
  TRAINYARD_S3_ENDPOINT: z.string().optional(),
  TRAINYARD_S3_BUCKET: z.string().default('trainyard'),
  TRAINYARD_S3_ACCESS_KEY: z.string().optional(),
  TRAINYARD_S3_SECRET_KEY: z.string().optional(),
  TRAINYARD_S3_REGION: z.string().default('us-east-1'),
  TRAINYARD_ARCHIVE_MAX_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(4 * 1024 ** 3),
  TRAINYARD_ARCHIVE_MAX_ENTRIES: z.coerce.number().int().positive().default(50_000),
  /** The Ed25519 key (base64 PKCS#8) that signs the events this process appends. */
  TRAINYARD_SIGNING_KEY: z.string().optional(),
  /** Public keys (base64 SPKI, comma-separated) whose signatures `events verify` accepts. */
  TRAINYARD_TRUSTED_KEYS: z.string().optional(),
  /** The NATS URL the API tells enrolled workers to connect to (default: its own, no login). */
  TRAINYARD_WORKER_NATS_URL: z.string().optional(),
  /**
   * `false`: leave the streams and buckets as `trainyard nats setup` made them, for a login that
   * may not change them (a service's own in `infra/`).
   */
  TRAINYARD_MANAGE_STREAMS: z.enum(['true', 'false']).default('true'),
  /** A CA certificate (PEM file) to trust for a NATS that requires TLS. */
  TRAINYARD_NATS_CA: z.string().optional(),
  /** The Docker engine the builder (and a worker of the Docker runtime) uses: `unix:///path`. */
  TRAINYARD_DOCKER_HOST: z
    .string()
    .regex(/^unix:\/\/\/./, 'unix:///path/to/docker.sock')
    .optional(),
  /**
   * The registry jobs' images are pushed to and pulled from (`host:port`). With it set, jobs may
   * name an image and run in containers; without it, they run on the host.
   */
  TRAINYARD_REGISTRY: z
    .string()
    .regex(/^[A-Za-z0-9.-]+(:[0-9]{1,5})?$/, 'host:port')
    .optional(),
  TRAINYARD_REGISTRY_USERNAME: z.string().optional(),
  TRAINYARD_REGISTRY_PASSWORD: z.string().optional(),
  /** The base image of a job that names none, where jobs run in containers (e.g. `python`). */
  TRAINYARD_DEFAULT_IMAGE: z.string().optional(),
  /** Where the builder's pip finds packages: an index URL, and/or a directory of wheels. */
  TRAINYARD_PIP_INDEX_URL: z.string().url().optional(),
  TRAINYARD_PIP_FIND_LINKS: z.string().optional(),
  /** The network the builder's RUN steps have: `none`, or `host` for an index on this host. */
  TRAINYARD_BUILD_NETWORK: z.string().default('none'),
  /** What one image build may take: its memory, and its time before it fails as the job's. */
  TRAINYARD_BUILD_MEMORY_GB: z.coerce.number().positive().default(4),
  TRAINYARD_BUILD_TIMEOUT_MIN: z.coerce.number().positive().default(60),
  /** The builder removes jobs' images older than this, then the oldest beyond the size cap. */
  TRAINYARD_IMAGE_MAX_AGE_HOURS: z.coerce.number().positive().default(168),
  TRAINYARD_IMAGE_CACHE_GB: z.coerce.number().positive().default(50),
  /**
   * A probe stops a job after this many optimizer steps, or once its peak memory has not grown
   * for `PLATEAU_STEPS`. One still running `TIMEOUT_MIN` after it started is stopped: what it
   * measured is the estimate, and with no step seen the job fails as its own fault.
   */
  TRAINYARD_PROBE_MAX_STEPS: z.coerce.number().int().min(2).max(1000).default(20),
  TRAINYARD_PROBE_PLATEAU_STEPS: z.coerce.number().int().min(1).max(1000).default(2),
  TRAINYARD_PROBE_TIMEOUT_MIN: z.coerce.number().positive().max(1440).default(10),
  /**
   * Priority a waiting job or session gains per hour in the queue (the scheduler's; default 10):
   * a job of priority -100 overtakes new jobs of priority 0 after 10 hours of waiting.
   */
  TRAINYARD_PRIORITY_AGING_PER_HOUR: z.coerce.number().min(0).max(1_000_000).optional(),
  /**
   * A gang job's attempt whose members have not all started this long after its assignment is
   * given up: every member is released and the job queued again (`gangIncomplete`).
   */
  TRAINYARD_GANG_ACCEPT_S: z.coerce.number().min(1).max(86_400).default(300),
  /**
   * A session whose run has not started this long after it was placed is stopped
   * (`startTimeout`); a run that never started, whose worker has not answered its stop this long
   * after, is taken for gone.
   */
  TRAINYARD_SESSION_START_LIMIT_MIN: z.coerce.number().min(0.05).max(1440).default(30),
  TRAINYARD_SESSION_STOP_LIMIT_MIN: z.coerce.number().min(0.05).max(1440).default(5),
  /** Where the SSH gateway listens (`trainyard gateway`; `up` takes a free port near it). */
  TRAINYARD_SSH_PORT: z.coerce.number().int().min(0).max(65_535).default(2222),
  TRAINYARD_SSH_LISTEN: z.string().default('0.0.0.0'),
});
export type BaseConfig = z.infer<typeof BaseConfigSchema>;

export class ConfigError extends Error {
  override name = 'ConfigError';
  readonly code = 'INVALID_CONFIG';
}

/** Parses the environment with a schema; a bad value stops start-up with a clear message. */
export function parseEnv<S extends z.ZodType>(
  schema: S,
  env: NodeJS.ProcessEnv = process.env,
): z.infer<S> {
  const result = schema.safeParse(env);
  if (!result.success) {
    const problems = result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
    throw new ConfigError(`invalid configuration: ${problems}`);
  }
  return result.data;
}
