/**
 * An exec's process in a container, signalled by its host pid (Docker has no API to signal an
 * exec): for the channels of container-channels.ts.
 */
import { readlinkSync } from 'node:fs';
import { constants } from 'node:os';
import type { ChannelExit } from '@trainyard/tunnel';
import { noop } from './process-channel.ts';
import { sessionGroups, SSH_SIGNALS, statOf, type Stat } from './proc.ts';

/** Whether two host pids share a pid namespace. */
function samePidNamespace(a: number, b: number): boolean {
  try {
    return readlinkSync(`/proc/${a}/ns/pid`) === readlinkSync(`/proc/${b}/ns/pid`);
  } catch {
    return false;
  }
}

/** A signal's SSH name (`INT`) from its number. */
function signalName(n: number): string | undefined {
  return Object.entries(constants.signals)
    .find(([, number]) => number === n)?.[0]
    .replace(/^SIG/, '');
}

/**
 * An exec's process, by its host pid: Docker has no API to signal one. runc makes every exec
 * lead a session and process group of its own (and hold its terminal, on one), so signals go to
 * its group, and on a terminal to the foreground job too; `end` reaches every group in its
 * session: HUP (on a terminal), TERM and CONT, then KILL after the grace. Its start time tells
 * it from a process that took its pid since, and one not first seen leading its session in the
 * container's pid namespace is never signalled. This is process-channel's `Leader` for a pid
 * that the worker did not spawn.
 */
export class ExecProcess {
  /** The signals sent, by number: an exit code of `128 + n` after one is that signal's end. */
  readonly #sent = new Set<number>();
  #ending = false;

  private constructor(
    readonly pid: number,
    private readonly start: number | null,
    private readonly tty: boolean,
  ) {}

  static of(pid: number, containerPid: number, tty: boolean): ExecProcess {
    const stat = statOf(pid);
    const ours = stat !== null && stat.session === pid && samePidNamespace(pid, containerPid);
    return new ExecProcess(pid, ours ? stat.start : null, tty);
  }

  /** /proc's word on the process, if it is still this one. */
  #stat(): Stat | null {
    const stat = this.start === null ? null : statOf(this.pid);
    return stat?.start === this.start && stat.session === this.pid ? stat : null;
  }

  #kill(group: number, name: string): void {
    if (group <= 1) return;
    const signal = `SIG${name}` as NodeJS.Signals;
    try {
      process.kill(-group, signal);
      this.#sent.add(constants.signals[signal]);
    } catch {
      // Gone meanwhile.
    }
  }

  signal(name: string): void {
    const stat = SSH_SIGNALS.has(name) ? this.#stat() : null;
    if (!stat || stat.state === 'Z') return;
    this.#kill(this.pid, name);
    if (this.tty && stat.foreground > 1 && stat.foreground !== this.pid)
      this.#kill(stat.foreground, name);
  }

  end(graceMs: number): void {
    if (this.#ending || this.start === null) return;
    this.#ending = true;
    // Gone itself, it may have left jobs behind in its session; only another process with its
    // pid means there is nothing of this one's left to end.
    const head = statOf(this.pid);
    if (head && head.start !== this.start) return;
    const all = async (...names: string[]) => {
      for (const group of await sessionGroups(this.pid))
        for (const name of names) this.#kill(group, name);
    };
    // A terminal's shell ignores TERM but not HUP; CONT lets a stopped job see the signal.
    const first = this.tty ? ['HUP', 'TERM'] : ['TERM'];
    void all(...first, 'CONT')
      .catch(noop)
      .then(() => {
        setTimeout(() => void all('KILL').catch(noop), graceMs).unref();
      });
  }

  /** How an exit code reads: `128 + n` after this channel sent signal `n` is that signal's. */
  exit(code: number): ChannelExit {
    const name = code > 128 && this.#sent.has(code - 128) ? signalName(code - 128) : undefined;
    return name ? { code: null, signal: name } : { code, signal: null };
  }
}
