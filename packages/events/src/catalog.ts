import { type z } from 'zod';
import { JobEventSchema, type JobEvent } from './job-events.ts';
import { SessionEventSchema, type SessionEvent } from './session.ts';
import { TeamEventSchema, type TeamEvent } from './team.ts';
import { UserEventSchema, type UserEvent } from './user.ts';
import { WorkerEventSchema, type WorkerEvent } from './worker.ts';

/** The kinds of aggregate whose events make up the log. */
export const Aggregate = {
  job: 'job',
  session: 'session',
  worker: 'worker',
  user: 'user',
  team: 'team',
} as const;
export type Aggregate = (typeof Aggregate)[keyof typeof Aggregate];

export type DomainEvent = JobEvent | SessionEvent | WorkerEvent | UserEvent | TeamEvent;
export type DomainEventType = DomainEvent['type'];

/** The events each aggregate may hold. */
export interface AggregateEvents {
  job: JobEvent;
  session: SessionEvent;
  worker: WorkerEvent;
  user: UserEvent;
  team: TeamEvent;
}

const schemas = {
  job: JobEventSchema,
  session: SessionEventSchema,
  worker: WorkerEventSchema,
  user: UserEventSchema,
  team: TeamEventSchema,
} as const satisfies Record<Aggregate, z.ZodType>;

/** Validates an event for an aggregate; throws a ZodError naming the bad field. */
export function parseEvent<A extends Aggregate>(aggregate: A, event: unknown): AggregateEvents[A] {
  return schemas[aggregate].parse(event) as AggregateEvents[A];
}

const known = new Set<string>(
  Object.values(schemas).flatMap((s) => s.options.map((o) => o.shape.type.value)),
);

/** True when `type` names an event in the catalogue. */
export function isKnownEventType(type: string): type is DomainEventType {
  return known.has(type);
}
