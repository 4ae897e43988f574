import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { promisify } from 'node:util';
import type Docker from 'dockerode';
import { inject } from 'vitest';
import { dockerAt } from '@trainyard/runtime';

const run = promisify(execFile);

declare module 'vitest' {
  export interface ProvidedContext {
    /** The test run's Docker engine (`unix://…`), or '' when none could be started. */
    dockerHost: string;
    /** Its loopback registry (`127.0.0.1:PORT`). */
    registry: string;
    /** Why there is no engine, when there is none. */
    dockerError: string;
  }
}

export interface TestDocker {
  docker: Docker;
  /** The engine's address, as `TRAINYARD_DOCKER_HOST` takes it. */
  host: string;
  /** The loopback registry, as `TRAINYARD_REGISTRY` takes it. */
  registry: string;
}

/**
 * The Docker engine and registry that the test run started for itself (a private `dockerd` on
 * its own socket, Debian's `docker-registry` on loopback), with the default base image made.
 * Fails, saying why, where the run could not start them.
 */
export function testDocker(): TestDocker {
  const host = inject('dockerHost');
  if (!host) {
    throw new Error(
      `no Docker engine for the tests: ${inject('dockerError')} (scripts/setup.sh --docker installs what it needs)`,
    );
  }
  return { docker: dockerAt(host), host, registry: inject('registry') };
}

/** Runs `command` (by `sh -c`) in a container of `image` with no network; its status and output. */
export async function runInImage(
  docker: Docker,
  image: string,
  command: string,
): Promise<{ code: number; output: string }> {
  let output = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      output += chunk.toString();
      done();
    },
  });
  const [result] = (await docker.run(image, ['sh', '-c', command], sink, {
    Tty: true,
    HostConfig: { AutoRemove: true, NetworkMode: 'none' },
  })) as [{ StatusCode: number }];
  return { code: result.StatusCode, output: output.replace(/\r\n/g, '\n') };
}

/**
 * Writes a pure-Python wheel of `name` 1.0 into `dir`, whose module's `GREETING` is `greeting`:
 * a package a requirements file can name, with no index to fetch it from.
 */
export async function writeWheel(dir: string, name: string, greeting: string): Promise<string> {
  const script = [
    'import sys, zipfile',
    'path, name, greeting = sys.argv[1:4]',
    'info = f"{name}-1.0.dist-info"',
    'with zipfile.ZipFile(path, "w") as z:',
    '    z.writestr(f"{name}/__init__.py", f"GREETING = {greeting!r}\\n")',
    '    z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\\nName: {name}\\nVersion: 1.0\\n")',
    '    z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\\nGenerator: trainyard-test\\n"',
    '               "Root-Is-Purelib: true\\nTag: py3-none-any\\n")',
    '    z.writestr(f"{info}/RECORD", "")',
  ].join('\n');
  const wheel = join(dir, `${name}-1.0-py3-none-any.whl`);
  await run('python3', ['-c', script, wheel, name, greeting]);
  return wheel;
}
