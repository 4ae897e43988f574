import type { BuiltImage, SessionSpec } from '@trainyard/events';
import { refusedBase } from '@trainyard/domain';
import type { Caller } from '../auth.ts';
import type { ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import type { StagedUpload } from '../upload.ts';
import { refuseTinyMemory, visibleJob } from './common.ts';

/**
 * The spec as this cluster runs it: where sessions run in containers, one that names no image
 * and no job gets the default base image, as a job does. A base image where no registry holds
 * images, an image and a job both, or a memory limit for a session on a worker's host (which
 * nothing would hold) is refused.
 */
export function withImagePolicy(spec: SessionSpec, images: ApiDeps['images']): SessionSpec {
  const refuse = (message: string) => new ApiError('VALIDATION_FAILED', message);
  if (spec.image !== undefined) {
    if (spec.fromJob !== undefined)
      throw refuse('image: a session runs in a job’s image (fromJob) or its own, not both');
    if (!images.enabled)
      throw refuse('image: this cluster runs sessions on its workers’ hosts, not in containers');
    const refused = refusedBase(spec.image, images.registry);
    if (refused) throw refuse(`image: ${refused}`);
  }
  refuseTinyMemory(spec.resources.memoryGb, 'resources.memoryGb');
  const image = spec.image ?? (spec.fromJob === undefined ? images.defaultImage : undefined);
  if (spec.resources.memoryGb !== undefined && image === undefined && spec.fromJob === undefined) {
    throw refuse(
      'resources.memoryGb: a memory limit holds for sessions in containers (image or fromJob); a session on a worker’s host has none',
    );
  }
  return image === undefined ? spec : { ...spec, image };
}

/**
 * The image a session runs in, from the job its spec names (`fromJob`): one of the caller's,
 * built; none for a session on a worker's host. A job's image holds its code: no other is taken.
 */
export async function imageFromJob(
  deps: ApiDeps,
  caller: Caller,
  spec: SessionSpec,
  staged: StagedUpload | undefined,
): Promise<BuiltImage | undefined> {
  const jobId = spec.fromJob;
  if (jobId === undefined) return undefined;
  const refuse = (message: string) => new ApiError('VALIDATION_FAILED', `fromJob: ${message}`);
  if (staged) throw refuse('a session from a job runs with the job’s code; send no code with it');
  if (!deps.images.enabled) throw refuse('this cluster runs no containers');
  const job = await visibleJob(deps, caller, jobId).catch((err: unknown) => {
    throw err instanceof ApiError && err.code === 'NOT_FOUND'
      ? refuse(`job ${jobId} not found`)
      : err;
  });
  const { image, spec: jobSpec, status } = job.state;
  if (image) return image;
  throw refuse(
    jobSpec?.image === undefined
      ? `job ${jobId} runs on a worker’s host and has no image`
      : `job ${jobId} has no image yet (it is ${status})`,
  );
}
