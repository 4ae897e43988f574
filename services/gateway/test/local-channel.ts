/**
 * Channels opened on this machine, standing in for the worker's end of the tunnel: `sh -c` for
 * commands and shells, node-pty when a terminal was asked for, `net.connect` for forwards.
 */
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { constants } from 'node:os';
import { PassThrough, Readable, Writable } from 'node:stream';
import * as pty from 'node-pty';
import {
  type Channel,
  type ChannelExit,
  ChannelRefused,
  type ChannelRequest,
} from '@trainyard/tunnel';

const SFTP_SERVER = '/usr/lib/openssh/sftp-server';

const ended = () => Readable.from([]);

export async function openLocalChannel(request: ChannelRequest): Promise<Channel> {
  if (request.kind === 'forward') return forward(request.port);
  if (request.kind === 'sftp') return child(SFTP_SERVER, [], {});
  const args = request.kind === 'exec' ? ['-c', request.command] : [];
  if (request.pty) return terminal(args, request.env, request.pty);
  return child('sh', args, request.env);
}

function child(file: string, args: string[], env: Record<string, string>): Channel {
  // A group of its own, so that closing it kills what `sh` started too.
  const proc = spawn(file, args, {
    env: { ...process.env, ...env },
    stdio: 'pipe',
    detached: true,
  });
  const kill = (signal: NodeJS.Signals) => {
    try {
      process.kill(-proc.pid!, signal);
    } catch {
      proc.kill(signal);
    }
  };
  const exit = new Promise<ChannelExit>((resolve) => {
    proc.once('close', (code, signal) =>
      resolve({ code, signal: signal ? signal.replace(/^SIG/, '') : null }),
    );
    proc.once('error', () => resolve({ code: 127, signal: null }));
  });
  return {
    input: proc.stdin,
    output: proc.stdout,
    errors: proc.stderr,
    resize: () => {},
    signal: (name) => kill(`SIG${name}` as NodeJS.Signals),
    close: () => kill('SIGKILL'),
    exit,
  };
}

function terminal(
  args: string[],
  env: Record<string, string>,
  size: { term: string; cols: number; rows: number },
): Channel {
  const term = pty.spawn('sh', args, {
    name: size.term || 'xterm',
    cols: size.cols,
    rows: size.rows,
    env: { ...process.env, ...env } as Record<string, string>,
  });
  const output = new PassThrough();
  term.onData((data) => output.write(data));
  const exit = new Promise<ChannelExit>((resolve) => {
    term.onExit(({ exitCode, signal }) => {
      output.end();
      resolve(
        signal ? { code: null, signal: signalName(signal) } : { code: exitCode, signal: null },
      );
    });
  });
  const input = new Writable({
    write(chunk: Buffer, _encoding, done) {
      term.write(chunk.toString('utf8'));
      done();
    },
  });
  return {
    input,
    output,
    errors: ended(),
    resize: (cols, rows) => term.resize(cols, rows),
    signal: (name) => term.kill(`SIG${name}`),
    close: () => term.kill('SIGKILL'),
    exit,
  };
}

function signalName(signal: number): string {
  const entry = Object.entries(constants.signals).find(([, n]) => n === signal);
  return entry ? entry[0].replace(/^SIG/, '') : 'KILL';
}

function forward(port: number): Promise<Channel> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('error', () =>
      reject(new ChannelRefused('unreachable', `nothing on port ${port}`)),
    );
    socket.once('connect', () => {
      socket.on('error', () => {});
      const exit = new Promise<ChannelExit>((done) =>
        socket.once('close', () => done({ code: 0, signal: null })),
      );
      resolve({
        input: socket,
        output: socket,
        errors: ended(),
        resize: () => {},
        signal: () => {},
        close: () => void socket.destroy(),
        exit,
      });
    });
  });
}
