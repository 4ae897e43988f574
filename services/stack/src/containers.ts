import { join } from 'node:path';
import { DEFAULT_BASE_IMAGE, dockerAt, ensureLocalBaseImage } from '@trainyard/runtime';
import { startDockerEngine, startRegistry, type ChildServer } from '@trainyard/servers';
import type { BaseConfig } from '@trainyard/service-kit';
import { CliError } from '@trainyard/cli';

/** Where jobs' containers run and their images are kept, for a stack that runs containers. */
export interface Containers {
  /** The Docker engine: `unix:///…/docker.sock`. */
  dockerHost: string;
  /** The registry jobs' images are pushed to: `host:port`. */
  registry: string;
  /** The default base image, and whether it was made now (its first use). */
  baseImage: { ref: string; made: boolean };
  /** The engine and registry this stack started (none when they were given). */
  children: ChildServer[];
}

/**
 * The Docker engine and registry of a stack that runs jobs in containers: those the config
 * names (`TRAINYARD_DOCKER_HOST`, `TRAINYARD_REGISTRY`), else a private `dockerd` and a loopback
 * registry under `home`. The default base image is made on the engine if it lacks it.
 */
export async function startContainers(home: string, config: BaseConfig): Promise<Containers> {
  const children: ChildServer[] = [];
  try {
    let dockerHost = config.TRAINYARD_DOCKER_HOST;
    if (!dockerHost) {
      const engine = await startDockerEngine({ dir: join(home, 'docker') });
      children.push(engine);
      dockerHost = engine.url;
    }
    let registry = config.TRAINYARD_REGISTRY;
    if (!registry) {
      const server = await startRegistry({ dir: join(home, 'registry') });
      children.push(server);
      registry = server.url;
    }
    const made = await ensureLocalBaseImage(dockerAt(dockerHost)).catch((err: unknown) => {
      throw new CliError(
        `could not make the default base image ${DEFAULT_BASE_IMAGE}: ${(err as Error).message}`,
        'NO_BASE_IMAGE',
      );
    });
    return { dockerHost, registry, baseImage: { ref: DEFAULT_BASE_IMAGE, made }, children };
  } catch (err) {
    for (const child of children.reverse()) await child.stop();
    throw err;
  }
}
