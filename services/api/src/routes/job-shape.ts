import type { JobSpec } from '@trainyard/events';
import { ApiError } from '../errors.ts';

/** What an array job's shards may hold in all: each shard's `JobSubmitted` copies its spec. */
const MAX_ARRAY_SPEC_BYTES = 16 * 1024 * 1024;

/**
 * Refuses what an array, a gang or a service may not be: too large an array, a gang of arrays, a
 * service of either, ports on a job that is no service.
 */
export function refuseBadShape(spec: JobSpec): void {
  const service = spec.kind === 'service';
  if (!service && (spec.ports !== undefined || spec.health !== undefined)) {
    const field = spec.ports !== undefined ? 'ports' : 'health';
    throw new ApiError('VALIDATION_FAILED', `${field}: only a service (kind "service") has this`);
  }
  if (service && (spec.shards !== undefined || (spec.nodes ?? 1) > 1)) {
    const field = spec.shards !== undefined ? 'shards' : 'nodes';
    throw new ApiError(
      'VALIDATION_FAILED',
      `${field}: a service runs alone, not as an array or a gang`,
    );
  }
  if ((spec.nodes ?? 1) > 1 && spec.shards !== undefined) {
    throw new ApiError(
      'VALIDATION_FAILED',
      'nodes: a job is an array (shards) or a gang (nodes), not both',
    );
  }
  if ((spec.nodes ?? 1) > 1 && spec.preemptible) {
    throw new ApiError('VALIDATION_FAILED', 'preemptible: a gang job (nodes) is not preemptible');
  }
  if (spec.shards === undefined) return;
  const bytes = Buffer.byteLength(JSON.stringify(spec)) * spec.shards;
  if (bytes > MAX_ARRAY_SPEC_BYTES) {
    throw new ApiError(
      'VALIDATION_FAILED',
      `shards: each shard carries the spec, ${spec.shards} of them ${Math.ceil(bytes / 1024 ** 2)} MiB in all, over ${MAX_ARRAY_SPEC_BYTES / 1024 ** 2} MiB: use fewer shards or a smaller env`,
    );
  }
}

/** The fields of a spec that reach a shell: none may hold a NUL, which no command can be given. */
export function refuseNul(spec: JobSpec): void {
  const fields: [string, string | undefined][] = [
    ['command', spec.command],
    ['setup', spec.setup],
    ['health.command', spec.health?.command],
    ...Object.entries(spec.env).map(([name, value]): [string, string] => [`env.${name}`, value]),
  ];
  const held = fields.find(([, value]) => value?.includes('\0'));
  if (held) {
    throw new ApiError(
      'VALIDATION_FAILED',
      `${held[0]}: holds a NUL character, which no command can be given`,
    );
  }
}
