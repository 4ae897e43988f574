/**
 * What /proc says of processes, for the channels that signal a shell's process groups: on the
 * host (process-channel.ts) and in a container, by host pid (container-channels.ts).
 */
import { readFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';

/** The signals a client may send, by their SSH names; anything else is ignored. */
export const SSH_SIGNALS = new Set('ABRT ALRM HUP INT KILL PIPE QUIT TERM USR1 USR2'.split(' '));

/** What /proc says of a process: its state, group, session, terminal's foreground group, start. */
export interface Stat {
  state: string;
  group: number;
  session: number;
  foreground: number;
  /** When it started, in clock ticks since boot: with the pid, which process this is. */
  start: number;
}

/** Reads a `/proc/PID/stat` line (its command name may hold spaces and parentheses). */
export function parseStat(text: string): Stat {
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return {
    state: f[0] ?? '',
    group: Number(f[2]),
    session: Number(f[3]),
    foreground: Number(f[5]),
    start: Number(f[19]),
  };
}

/** `pid`'s stat, or null when it is gone. */
export function statOf(pid: number): Stat | null {
  try {
    return parseStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return null;
  }
}

/** The process groups in the session `sid`: a shell's jobs have groups of their own. */
export async function sessionGroups(sid: number): Promise<Set<number>> {
  const groups = new Set<number>();
  const pids = (await readdir('/proc')).filter((e) => /^\d+$/.test(e));
  await Promise.all(
    pids.map(async (pid) => {
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8').then(parseStat, () => null);
      if (stat?.session === sid) groups.add(stat.group);
    }),
  );
  return groups;
}
