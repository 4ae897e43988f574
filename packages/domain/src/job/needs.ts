/** What a job asks of the cluster: a build, a probe, memory, a container. */
import type { CodeArchive, JobSpec, Resources } from '@trainyard/events';
import type { JobState } from './state.ts';

/** A job needs the builder when it has an image to build, or brings code or a setup step. */
export function needsBuild(spec: JobSpec, code: CodeArchive | undefined | null): boolean {
  return spec.image !== undefined || code != null || spec.setup != null;
}

/**
 * Whether a probe measures a job before it is placed: it asks for GPUs and declares no VRAM, and
 * is no service (whose first steps are not training steps).
 */
export function needsEstimate(spec: JobSpec): boolean {
  return spec.kind !== 'service' && spec.resources.gpus > 0 && spec.resources.vramGb === undefined;
}

/**
 * The host memory an attempt of the job needs: the limit it asked for, else what its probe
 * measured, else nothing counted.
 */
export function memoryNeed(state: JobState): number {
  if (state.spec?.resources.memoryGb !== undefined) return limitBytes(state.spec.resources);
  return state.estimate?.ramBytes ?? 0;
}

/** The memory limit resources ask for, in bytes; 0 without one. */
export function limitBytes(resources: Resources): number {
  const gb = resources.memoryGb;
  return gb === undefined ? 0 : Math.ceil(gb * 1024 ** 3);
}

/** Whether a job runs in a container (it names an image), on a worker of the Docker runtime. */
export function runsInContainer(spec: JobSpec): boolean {
  return spec.image !== undefined;
}
