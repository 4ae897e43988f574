import { Subjects } from '@trainyard/events';
import { possibleDispatchSlots } from '../dispatch.ts';
import type { NatsPermissions } from './nats-server.ts';

/** The streams a worker reads from or writes to, and the object store bucket it shares. */
const DISPATCH = 'TY_DISPATCH';
const LOGS = 'TY_LOGS';
const OBJECTS = 'OBJ_trainyard';

/** The JetStream calls on `stream` that reading it takes: consumers of its own, and gets. */
const readerOf = (stream: string) => [
  `$JS.API.CONSUMER.CREATE.${stream}`,
  `$JS.API.CONSUMER.CREATE.${stream}.>`,
  `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.>`,
  `$JS.API.CONSUMER.INFO.${stream}.>`,
  `$JS.API.CONSUMER.DELETE.${stream}.>`,
  `$JS.API.CONSUMER.MSG.NEXT.${stream}.>`,
  `$JS.API.DIRECT.GET.${stream}`,
  `$JS.API.DIRECT.GET.${stream}.>`,
  `$JS.API.STREAM.MSG.GET.${stream}`,
  `$JS.ACK.${stream}.>`,
];

/** The JetStream calls that reading consumers someone else made takes: no creating them. */
/**
 * Where workers' replies arrive: each worker's connection takes its inboxes under
 * `workerInbox(name)`, so that no worker can subscribe to the control plane's replies
 * (`_INBOX.>`), which carry other workers' dispatches and the secrets the services read.
 */
const WORKER_INBOXES = '_INBOX_W';
export const workerInbox = (workerId: string) => `${WORKER_INBOXES}.${workerId}`;

const bindingTo = (stream: string) => [
  `$JS.API.CONSUMER.INFO.${stream}.>`,
  `$JS.API.CONSUMER.MSG.NEXT.${stream}.>`,
  `$JS.ACK.${stream}.>`,
];

/** What every worker login may do besides taking its work, heartbeating and reporting. */
const WORKER_COMMON = [
  '$JS.API.INFO',
  `$JS.API.STREAM.INFO.${LOGS}`,
  `$JS.API.STREAM.INFO.${OBJECTS}`,
  `$JS.API.STREAM.PURGE.${OBJECTS}`,
  ...readerOf(LOGS),
  ...readerOf(OBJECTS),
  '$JS.FC.>',
  '$O.trainyard.>',
  'ty.log.>',
];

/**
 * What the shared `worker` user may do in `infra/nats`: heartbeat, report and ask (the control
 * plane answers what a worker may know of its jobs), take work from the dispatch stream, ship
 * logs, and read and write the object store. It may not read or append events (the control
 * plane appends what workers report), manage streams, read the buckets that hold secrets
 * (credentials, sessions, the token key), nor publish dispatches.
 */
export const WORKER_PERMISSIONS: NatsPermissions = {
  publish: {
    allow: [
      ...WORKER_COMMON,
      `$JS.API.STREAM.INFO.${DISPATCH}`,
      ...bindingTo(DISPATCH),
      'ty.hb.>',
      'ty.report.*',
    ],
  },
  subscribe: { allow: [`${WORKER_INBOXES}.>`] },
};

/**
 * What an enrolled worker's own user may do: heartbeat and report as itself only, read only its
 * own dispatch consumers (which the control plane makes), ship logs and use the object store.
 */
export function workerPermissions(workerId: string): NatsPermissions {
  const own = possibleDispatchSlots(workerId).flatMap(({ durable }) => [
    `$JS.API.CONSUMER.INFO.${DISPATCH}.${durable}`,
    `$JS.API.CONSUMER.MSG.NEXT.${DISPATCH}.${durable}`,
    `$JS.ACK.${DISPATCH}.${durable}.>`,
  ]);
  return {
    publish: {
      allow: [...WORKER_COMMON, ...own, Subjects.heartbeat(workerId), Subjects.report(workerId)],
    },
    subscribe: { allow: [`${workerInbox(workerId)}.>`] },
  };
}

/** The services of the control plane, each with a NATS login of its own on `up`'s server. */
export const CONTROL_SERVICES = ['api', 'scheduler', 'builder', 'projector', 'watchdog'] as const;
export type ControlService = (typeof CONTROL_SERVICES)[number];

/** Where a control-plane service's replies arrive: no other service may read them. */
const SERVICE_INBOXES = '_INBOX_S';
export const serviceInbox = (service: ControlService) => `${SERVICE_INBOXES}.${service}`;

/** Buckets that hold secrets: password hashes, sessions, the token key, worker enrolment. */
const SECRET_BUCKETS = [
  'ty_credentials',
  'ty_sessions',
  'ty_revocations',
  'ty_config',
  'ty_enrolments',
  'ty_worker_keys',
];

/** Every JetStream call that reads or writes a KV bucket. */
const bucketCalls = (bucket: string) => {
  const stream = `KV_${bucket}`;
  return [
    `$KV.${bucket}.>`,
    `$JS.API.STREAM.*.${stream}`,
    `$JS.API.STREAM.MSG.*.${stream}`,
    `$JS.API.DIRECT.GET.${stream}`,
    `$JS.API.DIRECT.GET.${stream}.>`,
    `$JS.API.CONSUMER.*.${stream}`,
    `$JS.API.CONSUMER.*.${stream}.>`,
    `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.>`,
  ];
};

/** What no service may do: take streams apart, or answer in another's name. */
const NO_SERVICE_MAY = [
  '$JS.API.STREAM.DELETE.>',
  '$JS.API.STREAM.UPDATE.>',
  '$JS.API.STREAM.MSG.DELETE.>',
  ...['TY_EVENTS', 'TY_DISPATCH', 'TY_HEARTBEATS', 'TY_LOGS'].map(
    (s) => `$JS.API.STREAM.PURGE.${s}`,
  ),
  '_INBOX.>',
  `${SERVICE_INBOXES}.>`,
  'ty.hb.>',
  'ty.report.>',
];

/**
 * Making a stream: a stream may copy another (`sources`, `mirror`), a secret bucket included.
 * The services but the API find theirs made (`ensureServiceBuckets`) and may make none.
 */
const NO_STREAMS = '$JS.API.STREAM.CREATE.>';

/** What each service may not publish, beyond `NO_SERVICE_MAY`. */
const SERVICE_DENIES: Record<ControlService, string[]> = {
  api: ['ty.dispatch.>'],
  scheduler: [...SECRET_BUCKETS.flatMap(bucketCalls), NO_STREAMS, 'ty.ev.user.>'],
  builder: [
    ...SECRET_BUCKETS.flatMap(bucketCalls),
    NO_STREAMS,
    'ty.ev.user.>',
    'ty.ev.worker.>',
    'ty.dispatch.>',
  ],
  projector: [
    ...SECRET_BUCKETS.flatMap(bucketCalls),
    NO_STREAMS,
    'ty.ev.>',
    'ty.dispatch.>',
    'ty.log.>',
    '$O.>',
  ],
  watchdog: [
    ...SECRET_BUCKETS.filter((b) => b !== 'ty_worker_keys').flatMap(bucketCalls),
    NO_STREAMS,
    // It reads worker keys, to refuse revoked workers; it may not write or purge them.
    '$KV.ty_worker_keys.>',
    '$JS.API.STREAM.PURGE.KV_ty_worker_keys',
    'ty.ev.user.>',
    'ty.dispatch.>',
  ],
};

/**
 * What one control-plane service's login may do on `up`'s server: anything it needs, nothing
 * that takes the log apart, and only the API reads the secret buckets (the watchdog also reads
 * worker keys, to refuse revoked workers). Replies reach it under its own inbox.
 */
export function servicePermissions(service: ControlService): NatsPermissions {
  return {
    publish: { deny: [...NO_SERVICE_MAY, ...SERVICE_DENIES[service]] },
    subscribe: {
      allow: [`${serviceInbox(service)}.>`, ...(service === 'watchdog' ? ['ty.report.*'] : [])],
    },
  };
}
