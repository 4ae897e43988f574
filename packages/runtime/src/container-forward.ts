/**
 * `ssh -L` into a container: its network is its own (`none` for jobs), so the connection is
 * made from inside its network namespace, by a relay that nsenter starts there.
 */
import { spawn } from 'node:child_process';
import { type Channel, type ChannelExit, ChannelRefused } from '@trainyard/tunnel';
import { closed, ended, noop } from './process-channel.ts';

/** Where Debian's util-linux puts nsenter. */
const NSENTER = '/usr/bin/nsenter';

/** How the relay says that nothing answers on the port. */
const UNREACHABLE_EXIT = 2;

/**
 * What a forward runs in the container's network namespace, on the worker's own node: a
 * connection to the port on 127.0.0.1 there, copied to and from its stdin and stdout, each
 * direction ending on its own (an fs stream on fd 1 closes it at the end, which
 * `process.stdout` never does). It says `connected` on stderr once connected, or exits with
 * `UNREACHABLE_EXIT`, saying why not.
 */
const RELAY = `
const net = require('node:net');
const fs = require('node:fs');
const port = Number(process.argv[1]);
const socket = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true });
socket.once('error', (err) => {
  process.stderr.write(err.message + '\\n');
  process.exit(${UNREACHABLE_EXIT});
});
socket.once('connect', () => {
  process.stderr.write('connected\\n');
  process.stdin.pipe(socket);
  socket.pipe(fs.createWriteStream('', { fd: 1 }));
  socket.once('close', () => process.stdin.destroy());
});
`;

/**
 * A TCP connection to `port` on the container's loopback, through the relay, which nsenter
 * starts in the container's network namespace as the session's uid and gid, with no other
 * group; `input.end()` half-closes it, and its end of the connection ends `output`.
 */
export async function forward(
  containerPid: number,
  user: { uid: number; gid: number },
  port: number,
  opts: { nsenter?: string; connectTimeoutMs?: number },
): Promise<Channel> {
  if (!Number.isInteger(port) || port < 1 || port > 65_535)
    throw new ChannelRefused('refused', `no port ${port}`);
  const nsenter = opts.nsenter ?? NSENTER;
  const timeoutMs = opts.connectTimeoutMs ?? 10_000;
  const child = spawn(
    nsenter,
    [
      `--target=${containerPid}`,
      '--net',
      `--setuid=${user.uid}`,
      `--setgid=${user.gid}`,
      '--',
      process.execPath,
      '-e',
      RELAY,
      `${port}`,
    ],
    { cwd: '/', env: {}, stdio: 'pipe' },
  );
  child.on('error', noop);
  for (const stream of [child.stdin, child.stdout, child.stderr]) stream.on('error', noop);
  const exit = new Promise<ChannelExit>((resolve) =>
    child.once('close', () => resolve({ code: null, signal: null })),
  );

  await new Promise<void>((resolve, reject) => {
    let said = '';
    let settled = false;
    const settle = (err?: ChannelRefused) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.stderr.off('data', hear);
      child.stderr.resume();
      if (!err) return resolve();
      child.kill('SIGKILL');
      reject(err);
    };
    const hear = (chunk: Buffer) => {
      said += chunk.toString();
      if (said.startsWith('connected\n')) settle();
    };
    const timer = setTimeout(
      () => settle(new ChannelRefused('unreachable', `nothing answers on port ${port}: timed out`)),
      timeoutMs,
    );
    child.stderr.on('data', hear);
    child.once('error', (err) =>
      settle(new ChannelRefused('refused', `could not start ${nsenter}: ${err.message}`)),
    );
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    void Promise.all([exited, closed(child.stderr)]).then(([code]) => {
      const why = said.trim() || `the relay exited with ${String(code)}`;
      settle(
        code === UNREACHABLE_EXIT
          ? new ChannelRefused('unreachable', `nothing answers on port ${port}: ${why}`)
          : new ChannelRefused('refused', `could not reach the container's network: ${why}`),
      );
    });
  });

  return {
    input: child.stdin,
    output: child.stdout,
    errors: ended(),
    resize: noop,
    signal: noop,
    close() {
      child.kill('SIGKILL');
      child.stdin.destroy();
      child.stdout.destroy();
    },
    exit,
  };
}
