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
      '$JS.API.INFO',
      `$JS.API.STREAM.INFO.${DISPATCH}`,
      `$JS.API.STREAM.INFO.${LOGS}`,
      `$JS.API.STREAM.INFO.${OBJECTS}`,
      `$JS.API.STREAM.PURGE.${OBJECTS}`,
      ...bindingTo(DISPATCH),
      ...readerOf(LOGS),
      ...readerOf(OBJECTS),
      '$JS.FC.>',
      '$O.trainyard.>',
      'ty.hb.>',
      'ty.report.*',
      'ty.log.>',
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
      allow: [
        '$JS.API.INFO',
        `$JS.API.STREAM.INFO.${LOGS}`,
        `$JS.API.STREAM.INFO.${OBJECTS}`,
        `$JS.API.STREAM.PURGE.${OBJECTS}`,
        ...own,
        ...readerOf(LOGS),
        ...readerOf(OBJECTS),
        '$JS.FC.>',
        '$O.trainyard.>',
        Subjects.heartbeat(workerId),
        Subjects.report(workerId),
        'ty.log.>',
      ],
    },
    subscribe: { allow: [`${workerInbox(workerId)}.>`] },
  };
}
