/**
 * A session's run in a container (docker runtime): the image it runs in (a job's, by digest),
 * kept alive by a process that waits, confined as an attempt's container is, its SSH channels
 * opened in it by `docker exec`.
 */
import type Docker from 'dockerode';
import type { Channel, ChannelRequest } from '@trainyard/tunnel';
import { openContainerChannel, type ContainerPlace } from './container-channels.ts';
import {
  CONTAINER_WORK_DIR,
  confinedHost,
  containerAccount,
  Labels,
  type ConfineOptions,
  type ContainerLimits,
} from './confine.ts';

/** What a runtime needs to start a session's run in a container. */
export interface SessionRunSpec extends ContainerLimits {
  sessionId: string;
  runId: string;
  /** The image, by digest. */
  image: string;
}

/** A session's run in a container: channels open in it until it ends. */
export interface SessionContainer {
  open(request: ChannelRequest): Promise<Channel>;
  /** Removes the container, and everything running in it. */
  end(): Promise<void>;
}

/** Waits, doing nothing, until the container is stopped: what keeps a session's container up. */
const KEEP_ALIVE = 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done';

/** A container name for a session's run. */
export const sessionContainerName = (runId: string) =>
  `trainyard-session-${runId.replace(/[^A-Za-z0-9_.-]/g, '_')}`;

/** The environment a session's channels get: the image's, then the session's own. */
function containerSessionEnv(
  spec: SessionRunSpec,
  image: Record<string, string>,
): Record<string, string> {
  return {
    ...image,
    HOME: CONTAINER_WORK_DIR,
    LANG: 'C.UTF-8',
    // Inside the container its GPUs are numbered from 0, in the order they were given.
    CUDA_VISIBLE_DEVICES: spec.gpus.map((_, i) => i).join(','),
    CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
    TRAINYARD_SESSION_ID: spec.sessionId,
  };
}

/** How a session's container is made: confined, labelled with its session, run and worker. */
export function sessionContainerSpec(
  spec: SessionRunSpec,
  env: Record<string, string>,
  opts: ConfineOptions & { workerName: string },
): Docker.ContainerCreateOptions {
  const host = confinedHost(spec, opts, env);
  const user = containerAccount(spec.user);
  return {
    name: sessionContainerName(spec.runId),
    Image: spec.image,
    Entrypoint: [''],
    Cmd: ['/bin/sh', '-c', KEEP_ALIVE],
    User: `${user.uid}:${user.gid}`,
    WorkingDir: CONTAINER_WORK_DIR,
    Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
    Labels: {
      [Labels.session]: spec.sessionId,
      [Labels.run]: spec.runId,
      [Labels.worker]: opts.workerName,
    },
    HostConfig: host,
  };
}

/** The environment an image sets (`ENV`), which `docker exec` would give and a channel does not. */
export async function imageEnv(docker: Docker, image: string): Promise<Record<string, string>> {
  const info = await docker.getImage(image).inspect();
  const env: Record<string, string> = {};
  for (const pair of info.Config?.Env ?? []) {
    const at = pair.indexOf('=');
    if (at > 0) env[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return env;
}

const statusOf = (err: unknown) => (err as { statusCode?: number }).statusCode;

/** Starts a session's container from an image already on the engine. */
export async function startSessionContainer(
  docker: Docker,
  spec: SessionRunSpec,
  opts: ConfineOptions & { workerName: string },
): Promise<SessionContainer> {
  const env = containerSessionEnv(spec, await imageEnv(docker, spec.image));
  const container = await docker.createContainer(sessionContainerSpec(spec, env, opts));
  const end = async () => {
    await container.remove({ force: true, v: true }).catch((err: unknown) => {
      if (statusOf(err) !== 404) throw err;
    });
  };
  try {
    await container.start();
  } catch (err) {
    await end().catch(() => undefined);
    throw err;
  }
  const user = containerAccount(spec.user);
  const place: ContainerPlace = {
    containerId: container.id,
    user: `${user.uid}:${user.gid}`,
    dir: CONTAINER_WORK_DIR,
    env,
  };
  return { open: (request) => openContainerChannel(docker, place, request), end };
}
