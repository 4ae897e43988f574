import { z } from 'zod';
import {
  FailureSchema,
  ResourcesSchema,
  SESSION_NAME_MAX,
  SessionSpecSchema,
  SessionStatus,
  SessionTimersSchema,
} from '@trainyard/events';
import { HIDDEN_CHARACTERS, isoTime, PendingFields } from './schemas.ts';

/** The shapes of the session and SSH key routes; see `schemas.ts` for the rest. */

const timerField = (shape: z.ZodNumber, what: string) =>
  shape.optional().describe(`${what}, in minutes; capped by the cluster's operator`);

/** A session spec as the API takes it: unknown fields are refused rather than dropped. */
/** The multipart form of a session request, for the document: the body is read part by part. */
export const SessionFormSchema = z.unknown().meta({
  type: 'object',
  properties: {
    spec: { type: 'string', description: 'the session spec, as JSON' },
    code: {
      type: 'string',
      format: 'binary',
      description: 'a .tar.gz or .zip of code, unpacked in the session’s home',
    },
  },
  required: ['spec'],
});

export const SessionSpecBodySchema = SessionSpecSchema.extend({
  name: z
    .string()
    .trim()
    .min(1)
    .max(SESSION_NAME_MAX)
    .refine((n) => !HIDDEN_CHARACTERS.test(n), {
      message: 'control and bidirectional characters are not allowed in a name',
    })
    .optional()
    .describe('a name to know it by, e.g. in `trainyard ssh-config`'),
  resources: ResourcesSchema.extend({
    memoryGb: ResourcesSchema.shape.memoryGb.describe(
      'the memory the session may use, a hard limit: for a session in a container (`image` or `fromJob`)',
    ),
  }).strict(),
  timers: z
    .object({
      connectMin: timerField(
        SessionTimersSchema.shape.connectMin,
        'stopped if no one logged in this long after it started running',
      ),
      idleMin: timerField(
        SessionTimersSchema.shape.idleMin,
        'stopped when no channel has been open this long',
      ),
      maxMin: timerField(SessionTimersSchema.shape.maxMin, 'stopped this long after it started'),
    })
    .strict()
    .default({}),
})
  .strict()
  .superRefine((spec, ctx) => {
    if (spec.resources.gpuModel !== undefined && spec.resources.gpus === 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['resources', 'gpuModel'],
        message: 'a GPU model is for sessions that ask for GPUs: set gpus, or leave out gpuModel',
      });
    }
  })
  .meta({ id: 'SessionSpec' });

const SessionStatusSchema = z.enum(Object.values(SessionStatus));

export const SessionViewSchema = z
  .object({
    id: z.string().describe('also the username of its SSH logins'),
    name: z.string().nullable(),
    owner: z.string(),
    team: z.string().nullable().describe('the team its GPUs are charged to'),
    status: SessionStatusSchema,
    resources: ResourcesSchema,
    timers: SessionTimersSchema.describe('the timers in force'),
    fromJob: z.string().nullable().describe('the job whose image it runs in'),
    image: z.string().nullable().describe('the base image its own image is built on'),
    imageDigest: z.string().nullable().describe('the image it runs in, in a container'),
    workerId: z.string().nullable().describe('the worker that holds it now'),
    runId: z.string().nullable(),
    runs: z.number().int().describe('how many times it was placed'),
    gpus: z.array(z.number().int()),
    active: z.boolean().describe('a channel is open'),
    stopReason: z
      .enum(['user', 'neverConnected', 'idle', 'maxDuration', 'startTimeout'])
      .nullable(),
    failure: FailureSchema.nullable(),
    requeuedBecause: z.string().nullable(),
    requestedAt: isoTime,
    startedAt: isoTime.nullable(),
    connectedAt: isoTime.nullable(),
    lastLoginAt: isoTime.nullable(),
    endedAt: isoTime.nullable(),
    stopsAt: isoTime.nullable().describe('when a timer stops it, as things stand (running only)'),
    seq: z.number().int().describe('the stream sequence of the last event the view holds'),
    ...PendingFields,
  })
  .meta({ id: 'Session' });

export const SessionAcceptedSchema = z.object({
  id: z.string(),
  status: SessionStatusSchema,
  seq: z.number().int().describe('pass as ?after= to read your own write'),
});

export const SessionConnectSchema = z
  .object({
    host: z.string().describe('where the SSH gateway listens'),
    port: z.number().int(),
    username: z.string().describe('the session id'),
    password: z.string().describe('a one-time password, shown once'),
    expiresAt: isoTime.describe('the password works until then, once'),
    hostKey: z.string().describe("the gateway's public host key, an OpenSSH line: pin it"),
    hostKeyFingerprint: z.string(),
  })
  .meta({ id: 'SessionConnect' });

export const SshGatewaySchema = SessionConnectSchema.pick({
  host: true,
  port: true,
  hostKey: true,
  hostKeyFingerprint: true,
}).meta({ id: 'SshGateway' });

export const SessionIdParamsSchema = z.object({ id: z.string().describe('a session id') });

export const NewSshKeySchema = z
  .object({
    publicKey: z
      .string()
      .max(16_384)
      .describe('an OpenSSH public key line: TYPE BASE64 [COMMENT], as in ~/.ssh/id_ed25519.pub'),
    name: z
      .string()
      .trim()
      .max(256)
      .refine((n) => !HIDDEN_CHARACTERS.test(n), {
        message: 'control and bidirectional characters are not allowed in a name',
      })
      .optional()
      .describe("what to call it (default: the key's comment)"),
  })
  .strict();

export const SshKeyViewSchema = z
  .object({
    fingerprint: z.string().describe('SHA256:…, as ssh-keygen -l prints it'),
    type: z.string(),
    publicKey: z.string().describe('type and base64, without the comment'),
    name: z.string(),
    addedAt: isoTime,
  })
  .meta({ id: 'SshKey' });

export const FingerprintParamsSchema = z.object({
  fingerprint: z.string().describe('SHA256:…, URL-encoded'),
});
