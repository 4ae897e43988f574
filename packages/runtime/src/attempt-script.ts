import type { RunSpec } from './types.ts';
import { shellQuote } from './shell.ts';
import { LAUNCH_FIELDS } from './perl-spawner.ts';
import { probeExports } from './probe.ts';
import { SpawnError } from './spawner.ts';
import { attemptEnv } from './env.ts';
import { commandShell, hostDefaultSignals } from './default-signals.ts';

/** The status a script that ran `setup` and saw it fail ends with; the result file says more. */
export const SETUP_FAILED = 125;

export { shellQuote } from './shell.ts';

/**
 * The script that runs one attempt (`RunSpec.scriptFile`), as the attempt's user, in a new session,
 * in the work directory, with its output already sent to the log (the runtime's spawner did those,
 * as the worker). It sets the attempt's environment, runs `setup` if there is one, then the
 * command, each in a shell of its own started with SIGINT and SIGQUIT at their default (see
 * `DEFAULT_SIGNALS`), and records how it ended in the result file. It ends with its command's exit
 * code; a failed setup ends it with `SETUP_FAILED`.
 *
 * A stop is SIGTERM (or SIGINT, SIGHUP) to the attempt. Most attempts hear it through their process
 * group. An attempt of a user of its own hears it through the spawner's child, which passes it to
 * the script once the script's trap is set (the first process of a PID namespace drops a signal it
 * has no handler for); the script then sends it to every other process of its namespace. A program
 * under a shell that ends at once on SIGTERM may still be saving its work: the runtime waits out
 * the grace for an attempt's group to empty, and a stopped script of a user of its own (whose end
 * would end its PID namespace) waits until it is the namespace's last process.
 */
export function attemptScript(
  spec: RunSpec,
  host: NodeJS.ProcessEnv = process.env,
  defaultSignals = hostDefaultSignals(),
): string {
  const env = Object.entries(attemptEnv(spec, host)).map(
    ([name, value]) => `export ${shellQuote(`${name}=${value}`)}`,
  );
  const result = shellQuote(spec.resultFile);
  const end = spec.user ? '__ty_end' : 'exit';
  const setup = spec.setup
    ? [
        `echo "[trainyard] running setup"`,
        `__ty_run ${shellQuote(spec.setup)}`,
        `[ "$__ty_code" -eq 0 ] || { echo "setup-failed $__ty_code" > ${result}; ${end} ${SETUP_FAILED}; }`,
      ]
    : [];
  return [
    ...env,
    // The one variable read before it is set: a job's environment may not name it.
    'unset __ty_stopped',
    run(spec.user ? STOP_ISOLATED : STOP_GROUP, defaultSignals),
    ...(spec.user ? [LAST_TO_END] : []),
    ...setup,
    ...probeExports(spec),
    `__ty_run ${shellQuote(spec.command)}`,
    `if [ -n "$__ty_stopped" ] && [ "$__ty_code" -gt 128 ]; then echo "signal $((__ty_code - 128))" > ${result}; else echo "exit $__ty_code" > ${result}; fi`,
    `${end} "$__ty_code"`,
    '',
  ].join('\n');
}

/** What the trap does on a stop where the process group hears it: the subshell hears it again. */
const STOP_GROUP = '__ty_stopped=1; kill -TERM "$__ty_child" 2>/dev/null';

/**
 * What the trap does on a stop where the script alone hears it (passed on by the spawner's
 * child): the first sends it to every other process of the script's PID namespace (`-1`, from
 * the namespace's first process, running as the job's own uid), whatever group it is in.
 */
const STOP_ISOLATED = '[ -n "$__ty_stopped" ] || { __ty_stopped=1; kill -TERM -1 2>/dev/null; }';

/**
 * A twentieth of a second's pause while a stopped shell waits for the rest of its processes:
 * `sleep` from the system's own directories (never the job's PATH), failing (and so ending the
 * wait) where there is none or it takes no fraction.
 */
export const PAUSE = 'PATH=/usr/bin:/bin sleep 0.05 2>/dev/null';

/**
 * How a script of a user of its own ends: once stopped, only when it is the last process of its
 * PID namespace (each other one in its /proc ended), so that what still saves its work is not
 * killed with the namespace before the grace is out. The shell reaps the orphans it inherits
 * while it waits for each `sleep`.
 */
const LAST_TO_END = [
  '__ty_end() {',
  '  __ty_status=$1',
  '  while [ -n "$__ty_stopped" ]; do',
  '    set -- /proc/[0-9]*',
  `    [ "$#" -gt 1 ] && ${PAUSE} || break`,
  '  done',
  '  exit "$__ty_status"',
  '}',
].join('\n');

/**
 * Runs a command in a shell of its own (a subshell that starts it through `defaultSignals`) and
 * waits for it, with a trap on SIGTERM, SIGINT and SIGHUP (`stop`) while it runs: the script may
 * be the first process of a PID namespace, which ignores a signal it has no trap for, and a
 * stopping attempt must hear SIGTERM to save its work. The trap is set once the subshell is
 * forked, so the command starts with each signal at its default; a subshell forked after a stop
 * ends as SIGTERM would end it (143), without running its command.
 */
function run(stop: string, defaultSignals: string): string {
  return [
    '__ty_run() {',
    '  __ty_torun=$1',
    `  ([ -z "$__ty_stopped" ] || exit 143; exec ${commandShell(defaultSignals, '__ty_torun')}) &`,
    '  __ty_child=$!',
    `  trap '${stop}' TERM INT HUP`,
    '  while :; do wait "$__ty_child"; __ty_code=$?; kill -0 "$__ty_child" 2>/dev/null || break; done',
    '  trap - TERM INT HUP',
    '}',
  ].join('\n');
}

/** Whether `path` lies in /tmp or /dev/shm, which an attempt cannot have private copies of then. */
export function underSharedTmp(path: string): boolean {
  return /^\/(tmp|dev\/shm)(\/|$)/.test(path);
}

/**
 * What the spawner needs for one attempt, read (as the worker, before it drops to the attempt's
 * user) as data and never run: where to run, where the output, the process group and the end go,
 * and whom to run as. One `NAME=value` entry per field, each ended by a NUL, which no path holds.
 */
export function launchScript(spec: RunSpec, cgroupProcs = ''): string {
  const fields: Record<(typeof LAUNCH_FIELDS)[number], string> = {
    TY_WORK: spec.workDir,
    TY_LOG: spec.logFile,
    TY_PID: spec.pidFile,
    TY_EXIT: spec.exitFile,
    TY_SCRIPT: spec.scriptFile,
    TY_UID: spec.user ? String(spec.user.uid) : '',
    TY_GID: spec.user ? String(spec.user.gid) : '',
    TY_PRIVATE_TMP: spec.user && !underSharedTmp(spec.workDir) ? '1' : '0',
    TY_CGROUP: cgroupProcs,
  };
  return LAUNCH_FIELDS.map((name) => {
    if (fields[name].includes('\0')) throw new SpawnError(`${name} holds a NUL`);
    return `${name}=${fields[name]}\0`;
  }).join('');
}
