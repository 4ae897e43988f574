import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';

/** A server this process started; `stop` ends it and waits. */
export interface ChildServer {
  readonly pid: number;
  readonly url: string;
  stop(): Promise<void>;
  /** Ends it at once, as a crash would (SIGKILL). */
  kill(): Promise<void>;
}

/** Servers this process started that still run: told to stop if this process exits first. */
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGTERM');
});

/**
 * Spawns a long-running child in `cwd` (its own directory: a server may write stray files where
 * it runs), logging both its outputs to `logFile`, which is closed once both have ended; it dies
 * if it exits before `ready`. It runs in a process group
 * of its own, so that a Ctrl-C at the terminal reaches this process alone, which stops its
 * services before their servers; if this process exits with the child still running, the child
 * is told to stop (SIGTERM).
 */
export function spawnLogged(
  cmd: string,
  args: string[],
  logFile: string,
  opts: { cwd: string; env?: NodeJS.ProcessEnv; uid?: number; gid?: number },
): ChildProcess {
  const log = createWriteStream(logFile, { flags: 'a', mode: 0o600 });
  const child = spawn(cmd, args, {
    cwd: opts.cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: opts.env ?? process.env,
    detached: true,
    ...(opts.uid !== undefined && { uid: opts.uid, gid: opts.gid }),
  });
  running.add(child);
  child.once('exit', () => running.delete(child));
  let open = 2;
  const closed = () => {
    if (--open === 0) log.end();
  };
  for (const stream of [child.stdout, child.stderr]) {
    stream?.pipe(log, { end: false });
    stream?.once('close', closed);
  }
  return child;
}

/** Waits for `check` to pass, polling, until `timeoutMs`; fails early if `child` exits. */
export async function waitUntil(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs: number,
  child?: ChildProcess,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child && child.exitCode !== null)
      throw new Error(`${what} exited with code ${child.exitCode}`);
    if (await check().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`${what} not ready after ${timeoutMs} ms`);
}

/** Sends `signal` and resolves when the child has exited. */
export function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill(signal);
  });
}
