import { currentAttempt } from '@trainyard/domain';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { errorResponses, IdParamsSchema } from '../schemas.ts';
import { SessionConnectSchema } from '../session-schemas.ts';
import { callerOf, jobIdParam, visibleJob } from './common.ts';
import { connectAnswer } from './sessions.ts';

/** `trainyard ssh JOB_ID`: a shell beside a running job, through the SSH gateway. */
export function jobShellRoutes(app: Api, deps: ApiDeps): void {
  app.post(
    '/v1/jobs/:id/connect',
    {
      schema: {
        tags: ['jobs'],
        summary: 'A one-time password for SSH to a shell beside a running job',
        description:
          "Log in as the job's id: the shell runs beside the job's process, in its work directory (in its container, where it runs in one), as its user, with its environment, and ends with its attempt. Each call replaces the previous password; it holds for the current attempt only.",
        params: IdParamsSchema,
        response: { 200: SessionConnectSchema, ...errorResponses(401, 403, 404, 409, 503) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const id = jobIdParam(req);
      const { state } = await visibleJob(deps, caller, id);
      if (state.owner !== caller.username)
        throw new ApiError(
          'FORBIDDEN',
          `only its owner (${state.owner}) may open a shell in ${id}`,
        );
      const attempt = currentAttempt(state);
      if (state.status !== 'running' || attempt?.status !== 'running') {
        throw new ApiError(
          'INVALID_TRANSITION',
          `job ${id} is ${state.status}: a shell opens only beside a running job`,
        );
      }
      return connectAnswer(deps, req, id, { runId: attempt.id, owner: state.owner });
    },
  );
}
