import { accessSync, constants } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { freePorts, startNatsServer, type ChildServer } from '@trainyard/servers';
import { tempDir } from './tmp.ts';
import { waitFor } from './wait.ts';

/**
 * The nats-server clusters run on: the 2.10 that `scripts/setup.sh --cluster-tools` unpacks
 * under `.tools/` (2.9's clustered streams can fork a hash chain under concurrent appends), or
 * `TRAINYARD_NATS_SERVER_CLUSTER`; else the installed one.
 */
export function clusterNatsServer(): string | undefined {
  const candidates = [
    process.env.TRAINYARD_NATS_SERVER_CLUSTER,
    fileURLToPath(
      new URL('../../../.tools/nats-server-2.10/usr/sbin/nats-server', import.meta.url),
    ),
  ];
  for (const path of candidates) {
    if (!path) continue;
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      continue;
    }
  }
  return undefined;
}

/** One server of a test cluster; it can be killed and started again with its own store. */
export interface ClusterNode {
  readonly name: string;
  readonly url: string;
  running(): boolean;
  kill(): Promise<void>;
  start(): Promise<void>;
}

export interface TestNatsCluster {
  /** Every node's URL, comma separated, as services take it. */
  readonly url: string;
  readonly nodes: readonly ClusterNode[];
  /** The node whose name is `name`. */
  node(name: string): ClusterNode;
  stop(): Promise<void>;
}

/**
 * A real JetStream cluster of `size` `nats-server` processes on loopback, each with a store of its
 * own in a temp dir. It resolves once the cluster has a meta leader and can create an R`size`
 * stream, so a test may start services on it at once.
 */
export async function startTestNatsCluster(size = 3): Promise<TestNatsCluster> {
  try {
    return await startCluster(size);
  } catch (err) {
    // On a loaded machine a port chosen a moment ago can be taken before a node binds it, and
    // the cluster never forms: one more try, on other ports.
    if (!/meta leader/.test((err as Error).message)) throw err;
    return startCluster(size);
  }
}

async function startCluster(size: number): Promise<TestNatsCluster> {
  const dir = await tempDir('trainyard-nats-cluster-');
  const binary = clusterNatsServer();
  const ports = await freePorts(size * 2);
  const clientPorts = ports.slice(0, size);
  const routePorts = ports.slice(size);
  const routes = routePorts.map((p) => `nats://127.0.0.1:${p}`).join(',');
  const nodes = clientPorts.map((port, i): ClusterNode & { server: ChildServer | null } => {
    const name = `n${i + 1}`;
    const node = {
      name,
      url: `nats://127.0.0.1:${port}`,
      server: null as ChildServer | null,
      running: () => node.server !== null,
      kill: async () => {
        await node.server?.kill();
        node.server = null;
      },
      start: async () => {
        if (node.server) return;
        node.server = await startNatsServer({
          dir: join(dir.path, name),
          ...(binary && { binary }),
          port,
          args: [
            '--server_name',
            name,
            '--cluster_name',
            'trainyard-test',
            '--cluster',
            `nats://127.0.0.1:${routePorts[i]}`,
            '--routes',
            routes,
          ],
        });
      },
    };
    return node;
  });
  const url = nodes.map((n) => n.url).join(',');
  const stop = async () => {
    await Promise.all(nodes.map((n) => n.server?.stop()));
    await dir.remove();
  };
  try {
    await Promise.all(nodes.map((n) => n.start()));
    await waitFor('the NATS cluster to elect a meta leader', () => canCreateStream(url, size), {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
  } catch (err) {
    const logs = await Promise.all(nodes.map((n) => logTail(join(dir.path, n.name))));
    await stop();
    throw new Error(`${(err as Error).message}\n${logs.join('\n')}`, { cause: err });
  }
  return {
    url,
    nodes,
    node: (name) => {
      const found = nodes.find((n) => n.name === name);
      if (!found) throw new Error(`no node ${name} in the cluster`);
      return found;
    },
    stop,
  };
}

/** The last lines a node wrote to its log, so a cluster that never formed says why. */
async function logTail(nodeDir: string): Promise<string> {
  const text = await readFile(join(nodeDir, 'nats-server.log'), 'utf8').catch(
    (err: unknown) => `(no log: ${(err as Error).message})`,
  );
  const lines = text.trimEnd().split('\n').slice(-8);
  return `--- ${nodeDir}\n${lines.join('\n')}`;
}

/** Whether a stream of `replicas` can be made now; the reason it cannot is thrown, for the log. */
async function canCreateStream(url: string, replicas: number): Promise<boolean> {
  const nc = await connect({ servers: url.split(','), timeout: 1_000 });
  try {
    const jsm = await jetstreamManager(nc, { timeout: 2_000 });
    await jsm.streams.add({
      name: 'cluster_ready',
      subjects: ['cluster.ready'],
      num_replicas: replicas,
    });
    await jsm.streams.delete('cluster_ready');
    return true;
  } finally {
    await nc.close();
  }
}
