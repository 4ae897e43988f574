/** What an attempt's processes see of their environment, on the host and in a container. */
import type { RunSpec } from './types.ts';

/**
 * The PATH the spawner and attempts start with: system directories only, which no job can
 * write. The worker's own PATH may hold directories anyone can write (npm puts every
 * `node_modules/.bin` from the working directory up to / on it), and the spawner runs as root.
 */
export const SAFE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const PASSED_THROUGH = ['LANG', 'LC_ALL', 'TZ'];

/** The few host variables an attempt sees, and the safe PATH. */
export function hostEnv(host: NodeJS.ProcessEnv, path = SAFE_PATH): Record<string, string> {
  const env: Record<string, string> = { PATH: path };
  for (const name of PASSED_THROUGH) {
    const value = host[name];
    if (value !== undefined) env[name] = value;
  }
  return env;
}

/** The name of a job's or session's uid of its own: in `USER`, `LOGNAME` and a session's passwd. */
export const userName = (uid: number): string => `trainyard-${uid}`;

/**
 * The environment an attempt sees: a few host variables, the job's env, and Trainyard's; for an
 * attempt with a uid of its own, `USER` and `LOGNAME` name it (`getpass.getuser()` reads them
 * first, and the uid has no entry in the host's /etc/passwd), unless the job names them. CUDA
 * numbers GPUs in the order of their PCI bus, as `nvidia-smi` does, so that the GPUs placed are
 * the GPUs used on a host with mixed models (CUDA's own order puts the fastest first).
 */
export function attemptEnv(
  spec: Pick<
    RunSpec,
    'jobId' | 'attempt' | 'env' | 'workDir' | 'outputDir' | 'metricsFile' | 'gpus' | 'resumed'
  > &
    Partial<Pick<RunSpec, 'user'>>,
  host: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  return {
    ...hostEnv(host),
    HOME: spec.workDir,
    ...(spec.user && { USER: userName(spec.user.uid), LOGNAME: userName(spec.user.uid) }),
    ...spec.env,
    CUDA_VISIBLE_DEVICES: spec.gpus.join(','),
    CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
    TRAINYARD_JOB_ID: spec.jobId,
    TRAINYARD_ATTEMPT: String(spec.attempt),
    TRAINYARD_OUTPUT_DIR: spec.outputDir,
    ...(spec.metricsFile && { TRAINYARD_METRICS_FILE: spec.metricsFile }),
    ...(spec.resumed && { TRAINYARD_RESUMED: '1' }),
  };
}
