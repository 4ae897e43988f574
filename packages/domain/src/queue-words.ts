/** The queue in words: why an entry waits, and an entry as the API shows it. */
import type { QueueEntry, Resources } from '@trainyard/events';
import type { Pending } from './queue.ts';

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** What a job or session asks of a worker, in words. */
export function describeNeed(resources: Resources, container: boolean): string {
  const { gpus, vramGb, cpus, gpuModel, memoryGb } = resources;
  const parts = [
    gpus === 0
      ? plural(cpus ?? 1, 'CPU slot')
      : `${plural(gpus, `${gpuModel ? `${gpuModel} ` : ''}GPU`)}${vramGb === undefined ? ' (whole)' : ` with ${vramGb} GiB free`}`,
    ...(memoryGb === undefined ? [] : [`${memoryGb} GiB of memory`]),
  ];
  return `${parts.join(' and ')}${container ? ', in a container' : ''}`;
}

/** Why an entry waits, in words. */
function why(p: Pending): string {
  const need = () => describeNeed(p.resources, p.container);
  switch (p.reason) {
    case 'placing':
      return 'it fits now: the scheduler places it in its next round';
    case 'resources': {
      const r = p.reservation;
      const when = !r
        ? ''
        : r.stops > 0
          ? `; ${plural(r.stops, 'running attempt')} of preemptible work of a lower priority on ${r.workerId} ${r.stops === 1 ? 'is' : 'are'} stopped to make room for it`
          : `; room is reserved for it on ${r.workerId}, where running work reaches its time limits by ${iso(r.atMs)}`;
      return `waiting for room: it needs ${need()}, which no online worker has free now${when}`;
    }
    case 'reserved': {
      const r = p.reservation!;
      const advice =
        p.kind === 'session'
          ? ': a session whose maximum life ends before then starts now'
          : p.status === 'estimating'
            ? ' (its probe may run for the probes’ timeout)'
            : ': a time limit that ends it before then lets it start now';
      return `it could start now, but only on what is reserved for ${r.id} (first in line, due to start by ${iso(r.atMs)} on ${r.workerId}), and it could still run then${advice}`;
    }
    case 'gangIncomplete': {
      const free = p.freeNodes;
      return `waiting for room on ${p.nodes} workers at once: it needs ${need()} on each, and ${free === 0 ? 'no online worker has' : `only ${plural(free, 'online worker')} ${free === 1 ? 'has' : 'have'}`} that free now`;
    }
    case 'priority':
      return `waiting for room behind ${plural(p.ahead, 'earlier entry', 'earlier entries')} of the queue that need the same (${need()})`;
    case 'unsatisfiable':
      return `no online worker could ever hold it: it needs ${need()}`;
    case 'noWorkers':
      return 'no worker is online';
    case 'dependency':
      return `waiting for ${p.dependsOn.join(', ')} to succeed`;
    case 'retryBackoff':
      return `its last attempt ended (see its failure): it starts again at ${p.retryAt}`;
    case 'building':
      return p.status === 'building' ? 'its image is being built' : 'waiting for a builder';
    case 'held': {
      const { by, reason } = p.hold!;
      const why = reason ? ` (${reason})` : '';
      return by === 'admin'
        ? `held by an admin${why}: only an admin may release it`
        : `held by ${p.owner}${why}: \`trainyard release ${p.id}\` lets it queue`;
    }
    case 'overQuota': {
      const { kind, held, limit, team } = p.quota!;
      const whose = team === null ? `${p.owner}'s quota` : `team ${team}'s quota`;
      const work = team === null ? 'their work' : 'its members’ work';
      if (kind === 'gpuHours')
        return limit === 0
          ? `${whose} of GPU-hours a month is 0: it runs only if an admin raises the quota`
          : `over ${whose} of ${limit} GPU-hours a month: ${work} took ${Number(held.toFixed(4))} this month (UTC); it waits for the next month, or for an admin to raise the quota`;
      const gpus = p.resources.gpus * p.nodes;
      return gpus > limit
        ? `it asks for ${plural(gpus, 'GPU')}, more than ${whose} of ${limit} at once: it runs only if an admin raises the quota`
        : `over ${whose}: ${work} holds ${plural(held, 'GPU')} of the ${limit} it may hold at once (with what the next round places), and this needs ${gpus} more`;
    }
  }
}

/** An entry as the API shows it. */
export function describePending(p: Pending): QueueEntry {
  return {
    kind: p.kind,
    id: p.id,
    owner: p.owner,
    team: p.team,
    status: p.status,
    position: p.position,
    priority: p.priority,
    effectivePriority: p.effectivePriority,
    resources: p.resources,
    reason: p.reason,
    message: why(p),
    since: iso(p.sinceMs),
    retryAt: p.retryAt,
    expectedStart: p.reason === 'resources' && p.reservation ? iso(p.reservation.atMs) : null,
  };
}

const iso = (ms: number) => new Date(ms).toISOString();
