import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Channel, type ChannelRequestInput, ChannelRequestSchema } from '@trainyard/tunnel';
import { tempDir, testDocker, waitFor } from '@trainyard/testkit';
import {
  type ContainerPlace,
  DEFAULT_BASE_IMAGE,
  openContainerChannel,
  SESSION_PATH,
} from '../src/index.ts';
import { collect, sftpWire } from './channels.ts';

const run = promisify(execFile);
const { docker } = testDocker();
const UID = 4321;
const DIR = '/tmp/session';
/** Where Debian's openssh-sftp-server puts the server, on this host and in an image. */
const SFTP_SERVER = '/usr/lib/openssh/sftp-server';

let tmp: Awaited<ReturnType<typeof tempDir>>;
const containers: Docker.Container[] = [];
let place: ContainerPlace;
const open: Channel[] = [];

/**
 * A long-lived container made as the Docker runtime makes an attempt's (no network, no
 * capabilities, not root), with an environment of its own that no channel may see, and a
 * session directory owned by the session's uid, put in before it starts with `files`.
 */
async function sessionContainer(name: string, files: string[] = []): Promise<Docker.Container> {
  const root = join(tmp.path, name);
  await mkdir(join(root, DIR), { recursive: true, mode: 0o700 });
  const container = await docker.createContainer({
    Image: DEFAULT_BASE_IMAGE,
    Cmd: ['sleep', '1000000'],
    User: `${UID}:${UID}`,
    WorkingDir: '/',
    Env: ['JOB_SECRET=the-container-s-own'],
    HostConfig: {
      NetworkMode: 'none',
      Init: true,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
    },
  });
  containers.push(container);
  const tar = async (...args: string[]) =>
    (await run('tar', ['--numeric-owner', '-cf', '-', ...args], { encoding: 'buffer' })).stdout;
  await container.putArchive(
    await tar('-C', join(root, 'tmp'), `--owner=${UID}`, `--group=${UID}`, 'session'),
    { path: '/tmp' },
  );
  if (files.length)
    await container.putArchive(await tar('-C', root, '--no-recursion', ...files), { path: '/' });
  await container.start();
  return container;
}

beforeAll(async () => {
  tmp = await tempDir('trainyard-container-channels-');
  const container = await sessionContainer('main');
  place = {
    containerId: container.id,
    user: `${UID}:${UID}`,
    dir: DIR,
    env: { GREETING: 'hello' },
  };
});
afterAll(async () => {
  for (const channel of open) channel.close();
  await Promise.all(containers.map((c) => c.remove({ force: true })));
  await tmp.remove();
});

async function channel(request: ChannelRequestInput, at: ContainerPlace = place): Promise<Channel> {
  const opened = await openContainerChannel(docker, at, ChannelRequestSchema.parse(request));
  open.push(opened);
  return opened;
}

/** Runs a command to its end: what it wrote to stdout and stderr, and how it ended. */
async function exec(command: string, env: Record<string, string> = {}, at = place) {
  const ch = await channel({ kind: 'exec', command, env }, at);
  ch.input.end();
  const out = collect(ch.output);
  const err = collect(ch.errors);
  const exit = await ch.exit;
  return { out: out(), err: err(), exit };
}

/** `env`'s output as an object. */
const parseEnv = (out: string) =>
  Object.fromEntries(
    out
      .trim()
      .split('\n')
      .map((l) => l.split(/=(.*)/s, 2)),
  ) as Record<string, string>;

/** Whether the container's process `pid` (in its own numbering) still runs. */
async function runs(pid: string): Promise<boolean> {
  const { out } = await exec(`if [ -d /proc/${pid} ]; then echo yes; else echo no; fi`);
  return out === 'yes\n';
}

describe('a command in a container', () => {
  it('keeps stdout and stderr apart and reports the exit code', async () => {
    const { out, err, exit } = await exec('echo to-out; echo to-err >&2; exit 7');
    expect(out).toBe('to-out\n');
    expect(err).toBe('to-err\n');
    expect(exit).toEqual({ code: 7, signal: null });
  });

  it('gives cat its input, then the end of it', async () => {
    const ch = await channel({ kind: 'exec', command: 'cat; echo cat-ended' });
    const out = collect(ch.output);
    collect(ch.errors);
    ch.input.write('hello\n');
    await waitFor('cat to echo', () => out() === 'hello\n');
    ch.input.end('world\n');
    expect(await ch.exit).toEqual({ code: 0, signal: null });
    expect(out()).toBe('hello\nworld\ncat-ended\n');
  });

  it('runs as the place’s uid and gid, in its directory', async () => {
    const { out, exit } = await exec('id -u; id -g; pwd');
    expect(out).toBe(`${UID}\n${UID}\n${DIR}\n`);
    expect(exit).toEqual({ code: 0, signal: null });
  });

  it('sees the place’s environment and the client’s locale, none of the worker’s or the container’s', async () => {
    const secret = `TY_WORKER_SECRET_${process.pid}`;
    process.env[secret] = 'leaked';
    try {
      const { out } = await exec('env', {
        LANG: 'C.UTF-8',
        LD_PRELOAD: '/nonexistent/preload.so',
        GREETING: 'overridden',
      });
      const env = parseEnv(out);
      expect(env).toMatchObject({
        GREETING: 'hello',
        LANG: 'C.UTF-8',
        PATH: SESSION_PATH,
        HOME: DIR,
        SHELL: '/bin/sh',
      });
      for (const name of [secret, 'JOB_SECRET', 'HOSTNAME', 'LD_PRELOAD'])
        expect(env).not.toHaveProperty(name);
      expect(out).not.toContain('leaked');
    } finally {
      delete process.env[secret];
    }
  });

  it('ends the command on a client’s INT, reported as the signal', async () => {
    const ch = await channel({ kind: 'exec', command: 'sleep 100' });
    collect(ch.output);
    collect(ch.errors);
    ch.signal('NOSUCH');
    ch.signal('INT');
    expect(await ch.exit).toEqual({ code: null, signal: 'INT' });
  });

  it('ends the whole session on close, a background job included', async () => {
    const ch = await channel({ kind: 'exec', command: 'sleep 100 & echo $!; sleep 100' });
    const out = collect(ch.output);
    collect(ch.errors);
    const pid = await waitFor('the background job', () => /^(\d+)\n/.exec(out())?.[1]);
    expect(await runs(pid)).toBe(true);
    ch.close();
    expect(await ch.exit).toMatchObject({ signal: 'TERM' });
    await waitFor('the background job to be gone', async () => !(await runs(pid)));
  });

  it('stops reading from a producer nobody reads: what it buffers stays bounded', async () => {
    const ch = await channel({ kind: 'exec', command: 'yes' });
    await waitFor('output', () => ch.output.readableLength > 0);
    await new Promise((r) => setTimeout(r, 500));
    const first = ch.output.readableLength;
    await new Promise((r) => setTimeout(r, 500));
    expect(ch.output.readableLength).toBe(first);
    expect(first).toBeLessThanOrEqual(1024 * 1024);
    const [chunk] = (await once(ch.output, 'data')) as [Buffer];
    expect(chunk.toString()).toMatch(/^(y\n)+/);
    ch.close();
    await ch.exit;
  });

  it('refuses root, a user by name, a missing directory and a container that is not running', async () => {
    const request = ChannelRequestSchema.parse({ kind: 'exec', command: 'true' });
    for (const user of ['0', '0:0', '0:1000', 'root', 'root:root', `${UID}:0`, `${UID}`])
      await expect(openContainerChannel(docker, { ...place, user }, request)).rejects.toMatchObject(
        { code: 'refused' },
      );
    await expect(
      openContainerChannel(docker, { ...place, dir: '/nowhere' }, request),
    ).rejects.toMatchObject({ code: 'refused', message: expect.stringContaining('/nowhere') });
    const stopped = await docker.createContainer({ Image: DEFAULT_BASE_IMAGE, Cmd: ['true'] });
    containers.push(stopped);
    for (const containerId of [stopped.id, 'no-such-container'])
      await expect(
        openContainerChannel(docker, { ...place, containerId }, request),
      ).rejects.toMatchObject({ code: 'refused' });
  });
});

describe('a terminal in a container', () => {
  const pty = { term: 'xterm', cols: 80, rows: 24 };

  it('runs an interactive shell on a pty that resizes', async () => {
    const ch = await channel({ kind: 'shell', pty });
    const out = collect(ch.output);
    ch.input.write('echo "term=$TERM"; stty size\n');
    await waitFor('TERM', () => /[\r\n]term=xterm\r\n/.test(out()));
    await waitFor('the first size', () => /[\r\n]24 80\r\n/.test(out()));
    ch.input.write('echo $((6 * 7))\n');
    await waitFor('the command’s output', () => /[\r\n]42\r\n/.test(out()));
    ch.resize(132, 43);
    ch.input.write('stty size\n');
    await waitFor('the new size', () => /[\r\n]43 132\r\n/.test(out()));
    ch.input.write('exit 3\n');
    expect(await ch.exit).toEqual({ code: 3, signal: null });
  });

  it('signals the foreground job, and ends the shell on close', async () => {
    const ch = await channel({ kind: 'shell', pty });
    const out = collect(ch.output);
    ch.input.write('sleep 200\n');
    await new Promise((r) => setTimeout(r, 300));
    ch.signal('INT');
    ch.input.write('echo "after=$?"\n');
    await waitFor('the foreground job to end', () => /after=130/.test(out()));
    ch.close();
    expect(await ch.exit).toEqual({ code: null, signal: 'HUP' });
  });
});

describe('sftp in a container', () => {
  it('is refused, saying so, where the image has no server', async () => {
    await expect(channel({ kind: 'sftp' })).rejects.toMatchObject({
      code: 'refused',
      message: 'the image has no sftp server (install openssh-sftp-server in it)',
    });
  });

  it.runIf(existsSync(SFTP_SERVER))(
    'runs the image’s server in the directory, as the place’s uid',
    async () => {
      // This host's server (it needs only libc, which the base has) and an account for the uid,
      // without which OpenSSH's server will not start.
      const root = join(tmp.path, 'sftp');
      await mkdir(join(root, 'usr/lib/openssh'), { recursive: true });
      await copyFile(SFTP_SERVER, join(root, SFTP_SERVER));
      await mkdir(join(root, 'etc'));
      const passwd = `root:x:0:0:root:/root:/bin/sh\nsession:x:${UID}:${UID}::${DIR}:/bin/sh\n`;
      await writeFile(join(root, 'etc/passwd'), passwd);
      const container = await sessionContainer('sftp', [SFTP_SERVER.slice(1), 'etc/passwd']);
      const at = { ...place, containerId: container.id };

      const ch = await channel({ kind: 'sftp' }, at);
      const err = collect(ch.errors);
      const wire = sftpWire(ch);
      wire.send(1, wire.u32(3));
      const version = await wire.next('VERSION');
      expect(version.type).toBe(2);
      expect(version.body.readUInt32BE(0)).toBe(3);

      wire.send(16, wire.u32(1), wire.str('.'));
      const name = await wire.next('the answer to REALPATH');
      expect(name.type).toBe(104);
      const length = name.body.readUInt32BE(8);
      expect(name.body.subarray(12, 12 + length).toString()).toBe(DIR);

      const WRITE_CREAT = 0x02 | 0x08;
      wire.send(3, wire.u32(2), wire.str('made-by-sftp'), wire.u32(WRITE_CREAT), wire.u32(0));
      const handle = await wire.next(`the answer to OPEN (stderr: ${err()})`);
      expect(handle.type).toBe(102);
      ch.input.end();
      expect(await ch.exit).toEqual({ code: 0, signal: null });

      const { out } = await exec(`stat -c '%u %g' ${DIR}/made-by-sftp`, {}, at);
      expect(out).toBe(`${UID} ${UID}\n`);
    },
  );
});

/** A server started in the container through a channel, once it says it listens. */
async function serve(command: string, ready: RegExp): Promise<Channel> {
  const ch = await channel({ kind: 'exec', command });
  const out = collect(ch.output);
  const err = collect(ch.errors);
  await waitFor('the server to listen', () => ready.test(out()) || ch.output.readableEnded);
  expect(out(), err()).toMatch(ready);
  return ch;
}

async function stop(server: Channel): Promise<void> {
  server.close();
  await server.exit;
}

describe('a forward into a container', () => {
  it('reaches an HTTP server on the container’s loopback', async () => {
    const server = await serve(
      'exec python3 -u -m http.server --bind 127.0.0.1 8000',
      /Serving HTTP on 127\.0\.0\.1 port 8000/,
    );
    try {
      const ch = await channel({ kind: 'forward', port: 8000 });
      const reply = collect(ch.output);
      ch.input.end('GET / HTTP/1.0\r\nHost: x\r\n\r\n');
      await ch.exit;
      expect(reply()).toMatch(/^HTTP\/1\.0 200 OK\r\n/);
      expect(reply()).toContain('Directory listing for /');
    } finally {
      await stop(server);
    }
  });

  it('half-closes each way: the server reads to the end, then answers', async () => {
    const script = [
      'import socket',
      'server = socket.create_server(("127.0.0.1", 8001))',
      'print("ready", flush=True)',
      'conn, _ = server.accept()',
      'got = b""',
      'while chunk := conn.recv(65536): got += chunk',
      'conn.sendall(got.upper())',
      'conn.close()',
    ].join('\n');
    const server = await serve(`exec python3 -c '${script}'`, /ready/);
    try {
      const ch = await channel({ kind: 'forward', port: 8001 });
      const reply = collect(ch.output);
      ch.input.write('hello, ');
      ch.input.end('container');
      await once(ch.output, 'end');
      expect(reply()).toBe('HELLO, CONTAINER');
      expect(await ch.exit).toEqual({ code: null, signal: null });
    } finally {
      await stop(server);
    }
  });

  it('is unreachable on a port nothing listens on there, the worker’s own ports included', async () => {
    const host = createServer((_req, res) => res.end('the worker')).listen(0, '127.0.0.1');
    await once(host, 'listening');
    try {
      for (const port of [8002, (host.address() as AddressInfo).port])
        await expect(channel({ kind: 'forward', port })).rejects.toMatchObject({
          code: 'unreachable',
        });
    } finally {
      await new Promise((r) => host.close(r));
    }
  });
});
