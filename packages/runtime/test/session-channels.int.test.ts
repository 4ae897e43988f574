import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { chmod, chown, mkdir, readdir, readFile, stat } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Channel,
  ChannelRefused,
  type ChannelRequestInput,
  ChannelRequestSchema,
} from '@trainyard/tunnel';
import { tempDir, waitFor } from '@trainyard/testkit';
import { type LocalPlace, openLocalChannel, SESSION_PATH } from '../src/index.ts';
import { collect, sftpWire } from './channels.ts';

const asRoot = process.getuid?.() === 0;
const UID = 200_001;

let tmp: Awaited<ReturnType<typeof tempDir>>;
let place: LocalPlace;
const open: Channel[] = [];

beforeAll(async () => {
  tmp = await tempDir();
  const dir = join(tmp.path, 'sandbox');
  await mkdir(dir, { mode: 0o700 });
  if (asRoot) await chown(dir, UID, UID);
  place = { dir, env: { GREETING: 'hello' }, ...(asRoot ? { uid: UID, gid: UID } : {}) };
});
afterAll(async () => {
  for (const channel of open) channel.close();
  await tmp.remove();
});

async function channel(request: ChannelRequestInput, at: LocalPlace = place): Promise<Channel> {
  const opened = await openLocalChannel(at, ChannelRequestSchema.parse(request));
  open.push(opened);
  return opened;
}

/** Runs a command to its end: what it wrote to stdout and stderr, and how it ended. */
async function run(command: string, env: Record<string, string> = {}, at: LocalPlace = place) {
  const ch = await channel({ kind: 'exec', command, env }, at);
  ch.input.end();
  const out = collect(ch.output);
  const err = collect(ch.errors);
  const exit = await ch.exit;
  return { out: out(), err: err(), exit };
}

/** Whether `pid` is gone, by signal 0 alone. */
function gone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

describe('a command on pipes', () => {
  it.runIf(asRoot)(
    'runs as the session’s uid and gid, with no other group, in its directory',
    async () => {
      const { out, exit } = await run('id -u; id -g; id -G; pwd');
      expect(out).toBe(`${UID}\n${UID}\n${UID}\n${place.dir}\n`);
      expect(exit).toEqual({ code: 0, signal: null });
    },
  );

  it.runIf(asRoot)(
    'names its uid in an /etc/passwd of its own, and can gain no privilege, /tmp the host’s',
    async () => {
      const before = await readFile('/etc/passwd', 'utf8');
      const { out, err } = await run(
        'whoami; echo "$USER $LOGNAME"; grep ^trainyard- /etc/passwd;' +
          ' grep ^NoNew /proc/self/status;' +
          ` test -d ${tmp.path} && echo "sees ${tmp.path}"`,
      );
      const name = `trainyard-${UID}`;
      expect(err).toBe('');
      expect(out).toBe(
        `${name}\n${name} ${name}\n` +
          `${name}:x:${UID}:${UID}:Trainyard session:${place.dir}:/bin/bash\n` +
          `NoNewPrivs:\t1\nsees ${tmp.path}\n`,
      );
      expect(await readFile('/etc/passwd', 'utf8')).toBe(before);
      expect(existsSync('/tmp/passwd')).toBe(false);
    },
  );

  it.runIf(asRoot)(
    'lets nothing in the place’s environment act before it drops to the uid (LD_*)',
    async () => {
      const debug = join(tmp.path, 'ld-debug');
      await mkdir(debug);
      await chmod(debug, 0o777);
      const at = { ...place, env: { LD_DEBUG: 'files', LD_DEBUG_OUTPUT: join(debug, 'ld') } };
      const { exit } = await run('true', {}, at);
      expect(exit).toMatchObject({ code: 0 });
      const sftp = await channel({ kind: 'sftp' }, at);
      sftp.input.end();
      expect(await sftp.exit).toMatchObject({ code: 0 });
      const written = await readdir(debug);
      expect(written.length).toBeGreaterThan(0);
      const owners = await Promise.all(written.map(async (f) => (await stat(join(debug, f))).uid));
      expect(new Set(owners)).toEqual(new Set([UID]));
    },
  );

  it('keeps stdout and stderr apart and reports the exit code', async () => {
    const { out, err, exit } = await run('echo to-out; echo to-err >&2; exit 7');
    expect(out).toBe('to-out\n');
    expect(err).toBe('to-err\n');
    expect(exit).toEqual({ code: 7, signal: null });
  });

  it('sees the place’s environment and none of the worker’s', async () => {
    const secret = `TY_WORKER_SECRET_${process.pid}`;
    process.env[secret] = 'leaked';
    try {
      const { out } = await run('env');
      const env = Object.fromEntries(
        out
          .trim()
          .split('\n')
          .map((l) => l.split(/=(.*)/s, 2)),
      );
      expect(env).not.toHaveProperty(secret);
      expect(out).not.toContain('leaked');
      expect(env).toMatchObject({ GREETING: 'hello', PATH: SESSION_PATH, HOME: place.dir });
    } finally {
      delete process.env[secret];
    }
  });

  it('takes the client’s locale and terminal names, not LD_PRELOAD, PATH or anything else', async () => {
    const { out, err } = await run('env', {
      LANG: 'C.UTF-8',
      LC_TIME: 'C',
      LD_PRELOAD: '/nonexistent/preload.so',
      PATH: '/nonexistent/bin',
      BASH_ENV: '/nonexistent/env',
      GREETING: 'overridden',
    });
    const env = Object.fromEntries(
      out
        .trim()
        .split('\n')
        .map((l) => l.split(/=(.*)/s, 2)),
    );
    expect(env).toMatchObject({
      LANG: 'C.UTF-8',
      LC_TIME: 'C',
      PATH: SESSION_PATH,
      GREETING: 'hello',
    });
    expect(env).not.toHaveProperty('LD_PRELOAD');
    expect(env).not.toHaveProperty('BASH_ENV');
    expect(err).toBe('');
  });

  it('ends the process group on a client’s INT, reported as the signal', async () => {
    const ch = await channel({ kind: 'exec', command: 'sleep 100' });
    collect(ch.output);
    collect(ch.errors);
    await new Promise((r) => setTimeout(r, 200));
    ch.signal('NOSUCH');
    ch.signal('INT');
    expect(await ch.exit).toEqual({ code: null, signal: 'INT' });
  });

  it('kills the whole group on close, a grandchild included', async () => {
    const ch = await channel({ kind: 'exec', command: 'sleep 100 & echo $!; sleep 100' });
    const out = collect(ch.output);
    collect(ch.errors);
    const pid = Number(await waitFor('the grandchild', () => /^(\d+)\n/.exec(out())?.[1]));
    expect(gone(pid)).toBe(false);
    ch.close();
    const exit = await ch.exit;
    expect(exit.signal).toBe('TERM');
    await waitFor('the grandchild to be gone', () => gone(pid));
  });

  it.runIf(asRoot)('kills nothing of a process that took its ended leader’s pid', async () => {
    const ch = await channel({ kind: 'exec', command: 'echo $$' });
    ch.input.end();
    const out = collect(ch.output);
    await ch.exit;
    const pid = Number(out().trim());
    ch.close();
    writeFileSync('/proc/sys/kernel/ns_last_pid', String(pid - 1));
    const other = spawn('sleep', ['30'], { detached: true, stdio: 'ignore' });
    try {
      expect(other.pid, 'a process started at the leader’s pid').toBe(pid);
      await new Promise((r) => setTimeout(r, 1_500));
      expect(gone(pid)).toBe(false);
    } finally {
      other.kill('SIGKILL');
    }
  });

  it('stops reading from a producer nobody reads: what it buffers stays bounded', async () => {
    const ch = await channel({ kind: 'exec', command: 'yes' });
    await new Promise((r) => setTimeout(r, 700));
    const first = ch.output.readableLength;
    await new Promise((r) => setTimeout(r, 500));
    expect(ch.output.readableLength).toBe(first);
    expect(first).toBeLessThanOrEqual(1024 * 1024);
    const chunk = (await once(ch.output, 'data')) as [Buffer];
    expect(chunk[0].toString()).toMatch(/^(y\n)+/);
    ch.close();
    await ch.exit;
  });

  it('refuses root, a missing directory and a gid without a uid', async () => {
    const request = { kind: 'exec' as const, command: 'true', env: {} };
    for (const bad of [
      { ...place, uid: 0, gid: 0 },
      { ...place, uid: UID, gid: 0 },
      { ...place, dir: join(tmp.path, 'nowhere') },
      { dir: place.dir, env: {}, gid: UID },
    ])
      await expect(openLocalChannel(bad, request)).rejects.toMatchObject({ code: 'refused' });
  });
});

describe('a terminal', () => {
  it('runs an interactive shell on a pty that resizes', async () => {
    const ch = await channel({ kind: 'shell', pty: { term: 'xterm', cols: 80, rows: 24 } });
    const out = collect(ch.output);
    ch.input.write('tty; echo "term=$TERM"\n');
    await waitFor('tty to answer', () => /\/dev\/pts\/\d+\r?\n/.test(out()));
    await waitFor('TERM', () => /term=xterm\r?\n/.test(out()));
    ch.input.write('echo $((6 * 7))\n');
    await waitFor('the command’s output', () => /[\r\n]42\r\n/.test(out()));
    ch.resize(132, 43);
    ch.input.write('stty size\n');
    await waitFor('the new size', () => /[\r\n]43 132\r\n/.test(out()));
    ch.input.write('exit 3\n');
    expect(await ch.exit).toEqual({ code: 3, signal: null });
  });

  it.runIf(asRoot)('runs a command as the session’s uid, its stderr on the terminal', async () => {
    const ch = await channel({
      kind: 'exec',
      command: 'id -u; echo oops >&2',
      pty: { term: 'vt100', cols: 80, rows: 24 },
    });
    const out = collect(ch.output);
    const err = collect(ch.errors);
    expect(await ch.exit).toEqual({ code: 0, signal: null });
    expect(out()).toBe(`${UID}\r\noops\r\n`);
    expect(err()).toBe('');
  });

  it('signals the foreground job and kills background jobs on close', async () => {
    const ch = await channel({ kind: 'shell', pty: { term: 'xterm', cols: 80, rows: 24 } });
    const out = collect(ch.output);
    ch.input.write('sleep 100 & echo "bg=$!"\n');
    const pid = Number(await waitFor('the job', () => /bg=(\d+)\r?\n/.exec(out())?.[1]));
    ch.input.write('sleep 200\n');
    await new Promise((r) => setTimeout(r, 300));
    ch.signal('INT');
    ch.input.write('echo "after=$?"\n');
    await waitFor('the foreground job to end', () => /after=130/.test(out()));
    expect(gone(pid)).toBe(false);
    ch.close();
    await ch.exit;
    await waitFor('the background job to be gone', () => gone(pid));
  });

  it('pauses a producer nobody reads: what it buffers stays bounded', async () => {
    const ch = await channel({
      kind: 'exec',
      command: 'yes',
      pty: { term: 'xterm', cols: 80, rows: 24 },
    });
    await new Promise((r) => setTimeout(r, 700));
    const first = ch.output.readableLength;
    await new Promise((r) => setTimeout(r, 500));
    expect(ch.output.readableLength).toBe(first);
    expect(first).toBeLessThanOrEqual(1024 * 1024);
    ch.close();
    await ch.exit;
  });

  it('stops taking input a process on its terminal does not read: what waits stays bounded', async () => {
    // Raw, as an editor sets it: a terminal in canonical mode drops what overflows its line.
    const ch = await channel({
      kind: 'exec',
      command: 'stty raw -echo; echo ready; sleep 30',
      pty: { term: 'xterm', cols: 80, rows: 24 },
    });
    const out = collect(ch.output);
    await waitFor('the terminal to be raw', () => out().includes('ready'));
    const chunk = Buffer.alloc(1024, 'x');
    let taken = 0;
    for (let i = 0; i < 16 * 1024; i++) ch.input.write(chunk, () => (taken += chunk.length));
    await new Promise((r) => setTimeout(r, 1_000));
    // The terminal took what its buffers hold; the other 16 MiB wait in the writer, whose
    // sender (the tunnel) gets no more credit meanwhile.
    expect(taken).toBeGreaterThan(0);
    expect(taken).toBeLessThan(1024 * 1024);
    expect(ch.input.writableLength).toBeGreaterThan(15 * 1024 * 1024);
    ch.close();
    await ch.exit;
    // What was still queued for it is dropped, not written later to whatever terminal takes
    // its descriptor number next.
    const next = await channel({
      kind: 'exec',
      command: 'stty raw -echo; echo ready; cat',
      pty: { term: 'xterm', cols: 80, rows: 24 },
    });
    const seen = collect(next.output);
    await waitFor('the next terminal', () => seen().includes('ready'));
    await new Promise((r) => setTimeout(r, 500));
    expect(seen()).not.toContain('x');
    next.close();
    await next.exit;
  });

  it('loses none of the output a process wrote before it exited, read at once or slowly', async () => {
    // libuv alone takes the hang-up after a short read for the end, and loses the rest.
    const size = 200_000;
    for (const everyMs of [0, 0, 0, 250]) {
      const ch = await channel({
        kind: 'exec',
        command: `head -c ${size} /dev/zero | tr '\\0' x`,
        pty: { term: 'xterm', cols: 80, rows: 24 },
      });
      let got = 0;
      let exited = false;
      void ch.exit.then(() => (exited = true));
      while (!exited) {
        await new Promise((r) => setTimeout(r, everyMs));
        for (let chunk: Buffer | null; (chunk = ch.output.read() as Buffer | null);)
          got += chunk.length;
      }
      expect(got).toBe(size);
    }
  });

  it('leaves no other terminal open in a session’s processes', async () => {
    const other = await channel({
      kind: 'exec',
      command: 'sleep 100',
      pty: { term: '', cols: 80, rows: 24 },
    });
    const onPipes = await run('ls -l /proc/$$/fd; true');
    expect(onPipes.out).not.toContain('ptmx');
    expect(onPipes.out).toContain('0 ->');
    const ch = await channel({
      kind: 'exec',
      command: 'ls -l /proc/$$/fd; true',
      pty: { term: '', cols: 200, rows: 24 },
    });
    const out = collect(ch.output);
    await ch.exit;
    expect(out()).toContain('0 -> /dev/pts/');
    expect(out()).not.toContain('ptmx');
    other.close();
    await other.exit;
  });

  it.runIf(asRoot)('gives a terminal none of the worker’s supplementary groups', async () => {
    process.setgroups!([4]);
    try {
      const ch = await openLocalChannel(place, {
        kind: 'exec',
        command: 'id -u; id -G',
        pty: { term: 'xterm', cols: 80, rows: 24 },
        env: {},
      });
      const out = collect(ch.output);
      expect(await ch.exit).toMatchObject({ code: 0 });
      expect(out().replace(/\r/g, '')).toBe(`${UID}\n${UID}\n`);
      const { out: piped } = await run('id -G');
      expect(piped).toBe(`${UID}\n`);
    } finally {
      process.setgroups!([]);
    }
  });
});

describe('sftp', () => {
  it('starts the server in the sandbox, as the session’s uid', async () => {
    const ch = await channel({ kind: 'sftp' });
    const err = collect(ch.errors);
    const wire = sftpWire(ch);

    ch.input.write(Buffer.from([0, 0, 0, 5, 1, 0, 0, 0, 3]));
    const version = await wire.next('VERSION');
    expect(version.type).toBe(2);
    expect(version.body.readUInt32BE(0)).toBe(3);

    wire.send(16, wire.u32(1), wire.str('.'));
    const name = await wire.next('the answer to REALPATH');
    expect(name.type).toBe(104);
    expect(name.body.readUInt32BE(4)).toBe(1);
    const length = name.body.readUInt32BE(8);
    expect(name.body.subarray(12, 12 + length).toString()).toBe(place.dir);

    const WRITE_CREAT = 0x02 | 0x08;
    wire.send(3, wire.u32(2), wire.str('made-by-sftp'), wire.u32(WRITE_CREAT), wire.u32(0));
    const handle = await wire.next(`the answer to OPEN (stderr: ${err()})`);
    expect(handle.type).toBe(102);
    const made = await stat(join(place.dir, 'made-by-sftp'));
    expect(made.uid).toBe(asRoot ? UID : process.getuid!());

    ch.input.end();
    expect(await ch.exit).toEqual({ code: 0, signal: null });
  });
});

/** An HTTP server on 127.0.0.1 that answers `hi URL`: in this process, or as `uid`. */
async function httpServer(uid?: number): Promise<{ port: number; stop(): Promise<void> }> {
  if (uid === undefined) {
    const server = createServer((req, res) => res.end(`hi ${req.url}`)).listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    return { port, stop: () => new Promise((r) => server.close(() => r())) };
  }
  const code = [
    "const server = require('node:http').createServer((req, res) => res.end('hi ' + req.url));",
    "server.listen(0, '127.0.0.1', () => console.log(server.address().port));",
    "process.stdin.on('end', () => process.exit(0)).resume();",
  ].join('\n');
  const child = spawn(process.execPath, ['-e', code], { uid, gid: uid, cwd: place.dir, env: {} });
  const said = collect(child.stdout);
  const port = Number(await waitFor('the server to listen', () => /^(\d+)\n/.exec(said())?.[1]));
  return {
    port,
    async stop() {
      child.stdin.end();
      await once(child, 'exit');
    },
  };
}

async function get(ch: Channel, path: string): Promise<string> {
  const out = collect(ch.output);
  ch.input.end(`GET ${path} HTTP/1.0\r\nHost: x\r\n\r\n`);
  await ch.exit;
  return out();
}

describe('a forward', () => {
  const ours = () => ({ dir: place.dir, env: {} });

  it('reaches a server on the loopback, and half-closes on end', async () => {
    const server = await httpServer();
    try {
      const reply = await get(await channel({ kind: 'forward', port: server.port }, ours()), '/x');
      expect(reply).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
      expect(reply).toMatch(/\r\n\r\nhi \/x$/);
    } finally {
      await server.stop();
    }
  });

  it.runIf(asRoot)('reaches, for a session with a uid, only what that uid listens on', async () => {
    const theirs = await httpServer(UID);
    const worker = await httpServer();
    try {
      const reply = await get(await channel({ kind: 'forward', port: theirs.port }), '/there');
      expect(reply).toMatch(/\r\n\r\nhi \/there$/);
      await expect(
        openLocalChannel(place, { kind: 'forward', port: worker.port }),
      ).rejects.toMatchObject({ code: 'unreachable' });
    } finally {
      await Promise.all([theirs.stop(), worker.stop()]);
    }
  });

  it('is unreachable on a port nobody listens on', async () => {
    const server = await httpServer();
    await server.stop();
    for (const at of [ours(), place]) {
      const opening = openLocalChannel(at, { kind: 'forward', port: server.port });
      await expect(opening).rejects.toBeInstanceOf(ChannelRefused);
      await expect(opening).rejects.toMatchObject({ code: 'unreachable' });
    }
  });
});
