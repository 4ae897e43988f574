import { Subjects } from '@trainyard/events';
import { workerBucket } from '@trainyard/blobs';
import {
  GATEWAY_BUCKET,
  GATEWAY_PUBLIC_BUCKET,
  possibleDispatchSlots,
  SSH_PASSWORDS_BUCKET,
} from '@trainyard/application';
import type { NatsPermissions } from './nats-server.ts';
import {
  serviceInbox,
  WORKER_INBOXES,
  workerInbox,
  type ControlService,
} from '@trainyard/service-kit';

/**
 * Buckets that hold secrets: password hashes, sessions, the token key, worker enrolment, the
 * hashes of SSH sessions' one-time passwords, and the SSH gateway's host key (its private half,
 * which only the gateway reads).
 */
const SECRET_BUCKETS = [
  'ty_credentials',
  'ty_sessions',
  'ty_revocations',
  'ty_config',
  'ty_enrolments',
  'ty_worker_keys',
  'ty_ssh_passwords',
  'ty_gateway',
];

/** The streams a worker reads from or writes to, and the object store bucket it shares. */
const DISPATCH = 'TY_DISPATCH';
const LOGS = 'TY_LOGS';
const METRICS = 'TY_METRICS';
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

/** Reading a stream's state and single messages, without a consumer. */
const lookupsIn = (stream: string) => [
  `$JS.API.STREAM.INFO.${stream}`,
  `$JS.API.STREAM.MSG.GET.${stream}`,
  `$JS.API.DIRECT.GET.${stream}`,
  `$JS.API.DIRECT.GET.${stream}.>`,
];

/** Reading and writing a KV bucket someone else made, watching it included. */
const bucketUser = (bucket: string) => [
  `$KV.${bucket}.>`,
  ...lookupsIn(`KV_${bucket}`),
  ...readerOf(`KV_${bucket}`),
];

/** Reading a KV bucket someone else made, watching it included. */
const bucketReader = (bucket: string) => [
  ...lookupsIn(`KV_${bucket}`),
  ...readerOf(`KV_${bucket}`),
];

/** Writing and replacing objects in an object store bucket (a replaced object's old chunks go). */
const objectsUser = (bucket: string) => [
  `$O.${bucket}.>`,
  ...lookupsIn(`OBJ_${bucket}`),
  ...readerOf(`OBJ_${bucket}`),
  `$JS.API.STREAM.PURGE.OBJ_${bucket}`,
];

/**
 * What a worker's own login may do: heartbeat and report as itself only, read only its own
 * dispatch consumers (which the control plane makes), read code and artifacts from the shared
 * object store, write only to its own bucket (which the control plane made for it), and ship
 * logs and training metrics only under its own name.
 */
export function workerPermissions(workerId: string): NatsPermissions {
  const own = possibleDispatchSlots(workerId).flatMap(({ durable }) => [
    `$JS.API.CONSUMER.INFO.${DISPATCH}.${durable}`,
    `$JS.API.CONSUMER.MSG.NEXT.${DISPATCH}.${durable}`,
    `$JS.ACK.${DISPATCH}.${durable}.>`,
  ]);
  return {
    publish: {
      allow: [
        '$JS.API.INFO',
        // It reads code and artifacts through the control plane (`fetchedBlobs`), only those
        // of the attempts it holds: no blob of the shared store.
        Subjects.fetch(workerId),
        `$O.${workerBucket(workerId)}.>`,
        ...lookupsIn(`OBJ_${workerBucket(workerId)}`),
        `$JS.API.STREAM.PURGE.OBJ_${workerBucket(workerId)}`,
        // Its own attempts' live logs, the newest chunk of each by subject: no other job's.
        `$JS.API.DIRECT.GET.${LOGS}.ty.log.*.*.${workerId}`,
        `ty.log.*.*.${workerId}`,
        `ty.metric.*.*.${workerId}`,
        ...own,
        Subjects.heartbeat(workerId),
        Subjects.report(workerId),
        // Its side of the SSH channels of the sessions it holds.
        `${Subjects.tunnelOut(workerId)}.>`,
      ],
    },
    subscribe: { allow: [`${workerInbox(workerId)}.>`, `${Subjects.tunnelIn(workerId)}.>`] },
  };
}

const EVENTS = 'TY_EVENTS';
const HEARTBEATS = 'TY_HEARTBEATS';

/** Following the event log and reading a stream of events by subject. */
const EVENT_READER = [...lookupsIn(EVENTS), ...readerOf(EVENTS)];

/** What every service does: ask JetStream what it has, find the object store, take flow control. */
const SERVICE_COMMON = ['$JS.API.INFO', `$JS.API.STREAM.INFO.${OBJECTS}`, '$JS.FC.>'];

/**
 * What each service may publish: an allow-list, its JetStream calls included. Only the API reads
 * the buckets that hold secrets and reads objects workers wrote (their buckets are named after
 * them, so its reads name no stream); it makes its own buckets, and no service makes any other
 * stream (a stream may copy another with `sources`, a secret bucket included). None may delete,
 * update or purge the log, the dispatch, heartbeat or log streams.
 */
const SERVICE_ALLOWS: Record<ControlService, string[]> = {
  api: [
    ...EVENT_READER,
    'ty.ev.job.*',
    'ty.ev.session.*',
    'ty.ev.team.*',
    'ty.ev.user.*',
    'ty.ev.worker.*',
    ...lookupsIn(HEARTBEATS),
    // It follows the heartbeats, to list the workers with their last beat.
    ...readerOf(HEARTBEATS),
    ...lookupsIn(LOGS),
    ...readerOf(LOGS),
    ...objectsUser('trainyard'),
    ...SECRET_BUCKETS.filter((b) => b !== GATEWAY_BUCKET).flatMap((b) => [
      `$JS.API.STREAM.CREATE.KV_${b}`,
      ...bucketUser(b),
    ]),
    // Questions to the leading scheduler about the queue.
    Subjects.queue,
    // The gateway's public host key, for clients to pin: read only, the gateway makes it.
    ...bucketReader(GATEWAY_PUBLIC_BUCKET),
    // Objects that workers wrote, in the bucket of each worker.
    '$JS.API.STREAM.INFO.*',
    '$JS.API.STREAM.MSG.GET.*',
    '$JS.API.DIRECT.GET.*',
    '$JS.API.DIRECT.GET.*.>',
    '$JS.API.CONSUMER.CREATE.*',
    '$JS.API.CONSUMER.CREATE.*.>',
  ],
  scheduler: [
    ...EVENT_READER,
    'ty.ev.job.*',
    'ty.ev.session.*',
    'ty.dispatch.>',
    ...bucketUser('ty_leases'),
    // Its answers to the API's questions about the queue.
    `${serviceInbox('api')}.>`,
    // The cluster snapshot.
    ...objectsUser('trainyard'),
  ],
  builder: [
    ...EVENT_READER,
    'ty.ev.job.*',
    // Sessions' builds.
    'ty.ev.session.*',
    // Code in, artifacts out.
    ...objectsUser('trainyard'),
    // Build logs are attempt 0 and carry no worker.
    'ty.log.*.0',
    ...lookupsIn(LOGS),
    ...bucketUser('ty_positions'),
    ...bucketUser('ty_alive'),
  ],
  // The log, and the training metrics that workers publish.
  projector: [...EVENT_READER, ...lookupsIn(METRICS), ...readerOf(METRICS)],
  watchdog: [
    ...EVENT_READER,
    'ty.ev.job.*',
    'ty.ev.session.*',
    'ty.ev.worker.*',
    ...lookupsIn(HEARTBEATS),
    ...readerOf(HEARTBEATS),
    // It makes each registering worker's dispatch consumers.
    ...readerOf(DISPATCH),
    `$JS.API.STREAM.INFO.${DISPATCH}`,
    // It reads code and artifacts for the workers that hold their attempts, and the outputs of
    // the attempt before, in the bucket of the worker that kept them (`startFetches`).
    ...lookupsIn(OBJECTS),
    '$JS.API.STREAM.INFO.*',
    '$JS.API.STREAM.MSG.GET.*',
    '$JS.API.DIRECT.GET.*',
    '$JS.API.DIRECT.GET.*.>',
    // It reads worker keys, to refuse revoked workers; it may not write or purge them.
    ...bucketReader('ty_worker_keys'),
    // Its answers to workers' reports, which come from the workers' account (see
    // WORKER_IMPORTS): the server maps each reply back to the worker that asked. An operator's
    // login, which may do anything, asks in the control plane's account, in a worker's inbox.
    '_R_.>',
    `${WORKER_INBOXES}.>`,
  ],
  gateway: [
    ...EVENT_READER,
    // It records logins on sessions, and on jobs (a shell beside a running attempt).
    'ty.ev.session.*',
    'ty.ev.job.*',
    // It opens channels on workers; they answer on `ty.tun.out.>`, which it subscribes to.
    Subjects.allTunnelsIn,
    // Its host key, which it makes on first start (and shows the public half of), and the
    // one-time passwords it uses up.
    ...[GATEWAY_BUCKET, GATEWAY_PUBLIC_BUCKET, SSH_PASSWORDS_BUCKET].flatMap((b) => [
      `$JS.API.STREAM.CREATE.KV_${b}`,
      ...bucketUser(b),
    ]),
  ],
};

/** The reads of the secret buckets that `allowed` does not name. */
const secretsNotGiven = (allowed: string[]) =>
  SECRET_BUCKETS.filter((b) => !allowed.includes(`$JS.API.STREAM.INFO.KV_${b}`)).flatMap((b) => [
    ...lookupsIn(`KV_${b}`),
    ...readerOf(`KV_${b}`),
  ]);

/** The services that read any stream (the buckets of every worker), less what they are denied. */
const READS_ANY_STREAM: ControlService[] = ['api', 'watchdog'];

/**
 * What one control-plane service's login may do on `up`'s server: what it needs, named; replies
 * reach it under its own inbox, and only the watchdog takes workers' reports.
 */
export function servicePermissions(service: ControlService): NatsPermissions {
  return {
    publish: {
      allow: [...SERVICE_COMMON, ...SERVICE_ALLOWS[service]],
      // The API and the watchdog read the buckets of every worker, named by worker: reads of
      // any stream, less the secret buckets they are not given by name.
      ...(READS_ANY_STREAM.includes(service) && {
        deny: secretsNotGiven(SERVICE_ALLOWS[service]),
      }),
    },
    subscribe: {
      allow: [
        `${serviceInbox(service)}.>`,
        ...(service === 'watchdog' ? ['ty.report.*', 'ty.fetch.*'] : []),
        ...(service === 'gateway' ? [Subjects.allTunnelsOut] : []),
        ...(service === 'scheduler' ? [Subjects.queue] : []),
      ],
    },
  };
}

/** The account of the control plane's logins, its streams and its buckets. */
export const CONTROL_ACCOUNT = 'TRAINYARD';
/** The account of workers' logins: it holds no stream, and reaches the control plane's only by
 * the services it imports. */
export const WORKER_ACCOUNT = 'WORKERS';

/**
 * What the workers' account imports from the control plane's, each a service: whatever a
 * worker's login may publish (`workerPermissions`) is among them, and each login's permissions still say which of them it may use. What the server sends on a worker's
 * behalf (the answer to a JetStream call, to whatever reply subject the worker named) is
 * delivered in the workers' account, where no stream stores it and no import carries it on: a
 * worker cannot have an answer stored on the control plane's subjects.
 */
export const WORKER_IMPORTS: { subject: string; stream?: true }[] = [
  { subject: '$JS.API.INFO' },
  { subject: '$JS.API.STREAM.INFO.*' },
  { subject: '$JS.API.STREAM.MSG.GET.*' },
  { subject: '$JS.API.DIRECT.GET.*' },
  { subject: '$JS.API.DIRECT.GET.*.>' },
  { subject: '$JS.API.STREAM.PURGE.*' },
  { subject: `$JS.API.CONSUMER.INFO.${DISPATCH}.*` },
  // A pull answers with as many messages as were asked for.
  { subject: `$JS.API.CONSUMER.MSG.NEXT.${DISPATCH}.*`, stream: true },
  { subject: `$JS.ACK.${DISPATCH}.>` },
  { subject: '$O.>' },
  { subject: 'ty.log.>' },
  { subject: Subjects.allMetrics },
  { subject: 'ty.hb.*' },
  { subject: 'ty.report.*' },
  { subject: 'ty.fetch.*' },
  // The worker's side of SSH channels, to the gateway.
  { subject: Subjects.allTunnelsOut },
];

/**
 * What the control plane's account sends the workers' account as a stream: the gateway's side
 * of SSH channels. Each worker's login may subscribe only to its own (`workerPermissions`).
 */
export const WORKER_STREAM_IMPORTS = [Subjects.allTunnelsIn];

/**
 * What the control plane's account exports: `WORKER_IMPORTS` and `WORKER_STREAM_IMPORTS`, to
 * the workers' account only.
 */
export const controlExports = () => [
  ...WORKER_IMPORTS.map(({ subject, stream }) => ({
    service: subject,
    accounts: [WORKER_ACCOUNT],
    ...(stream && { response_type: 'stream' }),
  })),
  ...WORKER_STREAM_IMPORTS.map((subject) => ({ stream: subject, accounts: [WORKER_ACCOUNT] })),
];

/** What the workers' account imports: those exports, from the control plane's account. */
export const workerImports = () => [
  ...WORKER_IMPORTS.map(({ subject }) => ({ service: { account: CONTROL_ACCOUNT, subject } })),
  ...WORKER_STREAM_IMPORTS.map((subject) => ({ stream: { account: CONTROL_ACCOUNT, subject } })),
];
