import type { NatsPermissions } from './nats-server.ts';

/** The streams a worker reads from or writes to, and the object store bucket it shares. */
const DISPATCH = 'TY_DISPATCH';
const EVENTS = 'TY_EVENTS';
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

/**
 * What the shared `worker` user may do on the embedded stack and in `infra/nats`: heartbeat,
 * report, take work from the dispatch stream, read job and worker events, ship logs, and read
 * and write the object store. It may not append events (the control plane appends what workers
 * report), manage streams, read the buckets that hold secrets (credentials, sessions, the token
 * key), nor publish dispatches.
 */
export const WORKER_PERMISSIONS: NatsPermissions = {
  publish: {
    allow: [
      '$JS.API.INFO',
      `$JS.API.STREAM.INFO.${DISPATCH}`,
      `$JS.API.STREAM.INFO.${EVENTS}`,
      `$JS.API.STREAM.INFO.${LOGS}`,
      `$JS.API.STREAM.INFO.${OBJECTS}`,
      `$JS.API.STREAM.PURGE.${OBJECTS}`,
      ...readerOf(DISPATCH),
      ...readerOf(EVENTS),
      ...readerOf(LOGS),
      ...readerOf(OBJECTS),
      '$JS.FC.>',
      '$O.trainyard.>',
      'ty.hb.>',
      'ty.report.*',
      'ty.log.>',
      '_INBOX.>',
    ],
  },
  subscribe: { allow: ['_INBOX.>'] },
};
