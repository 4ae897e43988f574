/**
 * Where each login's replies arrive, and the control plane's services: names every service
 * uses to connect, and the servers' permissions are written around.
 */

/**
 * Where workers' replies arrive: each worker's connection takes its inboxes under
 * `workerInbox(name)`, so that no worker can subscribe to the control plane's replies
 * (`_INBOX.>`), which carry other workers' dispatches and the secrets the services read.
 */
export const WORKER_INBOXES = '_INBOX_W';
export const workerInbox = (workerId: string) => `${WORKER_INBOXES}.${workerId}`;

/** The services of the control plane, each with a NATS login of its own on `up`'s server. */
export const CONTROL_SERVICES = [
  'api',
  'scheduler',
  'builder',
  'projector',
  'watchdog',
  'gateway',
] as const;
export type ControlService = (typeof CONTROL_SERVICES)[number];

/** Where a control-plane service's replies arrive: no other service may read them. */
const SERVICE_INBOXES = '_INBOX_S';
export const serviceInbox = (service: ControlService) => `${SERVICE_INBOXES}.${service}`;
