import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  CHOOSE_DEFAULT_SIGNALS,
  commandShell,
  DEFAULT_SIGNALS,
  hostDefaultSignals,
} from '../src/default-signals.ts';
import { shellQuote } from '../src/index.ts';
import { intOrQuitIgnored, PRINT_IGNORED } from './run-spec.ts';

/**
 * Runs `script` as `sh -c script sh COMMAND` in a mount namespace of its own, where each
 * `[from, onto]` of `binds` is mounted over `onto` first, so that a program there is not what
 * the host has; with `env` added to the environment.
 */
function run(
  script: string,
  command: string,
  binds: [string, string][] = [],
  env: Record<string, string | undefined> = {},
) {
  const environment = { ...process.env, ...env };
  for (const [name, value] of Object.entries(environment))
    if (value === undefined) delete environment[name];
  const mounts = binds.map(([from, onto]) => `mount --bind ${from} ${onto} && `).join('');
  const inner = `mount --make-rprivate / && ${mounts}exec /bin/sh -c "$0" sh "$1"`;
  const out = spawnSync('unshare', ['-m', '/bin/sh', '-c', inner, script, command], {
    encoding: 'utf8',
    env: environment,
  });
  return { status: out.status, stdout: out.stdout, stderr: out.stderr };
}

/** The command in `$1` run as an attempt's shell runs it: with `&`, through `through`. */
const started = (through: string) => `(exec ${commandShell(through, '1')}) & wait $!`;
/** What a container's wrapper does: it chooses, then runs "$@" with `&` and waits for it. */
const CHOOSE_AND_RUN = `${CHOOSE_DEFAULT_SIGNALS}\necho "through: $*"\n(exec "$@") & wait $!`;
/** busybox's `env`, which takes no `--default-signal`. */
const NO_ENV_OPTION: [string, string] = ['/bin/busybox', '/usr/bin/env'];
const NO_ENV: [string, string] = ['/dev/null', '/usr/bin/env'];
const NO_PERL: [string, string] = ['/dev/null', '/usr/bin/perl'];

/** What `hostDefaultSignals()` chooses in a process of its own, with `binds` mounted. */
function hostChoice(binds: [string, string][]): string {
  const module = fileURLToPath(new URL('../src/default-signals.ts', import.meta.url));
  const print = `import(${JSON.stringify(module)})
    .then((m) => console.log(m.hostDefaultSignals()))`;
  const node = [process.execPath, '--import', 'tsx', '-e', print].map(shellQuote).join(' ');
  const chosen = run(`exec ${node}`, '', binds);
  expect(chosen.status, chosen.stderr).toBe(0);
  return chosen.stdout.trim();
}

describe.runIf(process.getuid?.() === 0)(
  'a command started with SIGINT and SIGQUIT at their default',
  () => {
    it('is what a shell starts with & ignoring both, unless started through env or Perl, which keep its end', () => {
      const plain = run(started(''), PRINT_IGNORED);
      expect(intOrQuitIgnored(plain.stdout)).toEqual([['SIGINT', 'SIGQUIT']]);
      for (const through of Object.values(DEFAULT_SIGNALS)) {
        const out = run(started(through), `${PRINT_IGNORED}; exit 7`);
        expect(intOrQuitIgnored(out.stdout)).toEqual([[]]);
        expect(out.status).toBe(7);
        expect(run(started(through), 'kill -9 $$').status).toBe(137);
        const dashed = run(started(through), '-x; echo ran');
        expect([dashed.status, dashed.stdout]).toEqual([0, 'ran\n']);
      }
      const missing = run(`(exec ${DEFAULT_SIGNALS.perl} /nonexistent) & wait $!`, '');
      expect(missing.status).not.toBe(0);
      expect(missing.stderr).toContain('/nonexistent: No such file or directory');
    });

    it('starts Perl with none of the job’s variables that steer it, and gives the command them back', () => {
      const report = [
        'echo "opt=${PERL5OPT-unset} unicode=${PERL_UNICODE-unset} badlang=${PERL_BADLANG-unset}"',
        "env | grep '^__ty_' || echo 'no __ty_'",
        PRINT_IGNORED,
      ].join('; ');
      const out = run(started(DEFAULT_SIGNALS.perl), report, [], {
        PERL5OPT: '-Mnosuchmodule',
        PERL_UNICODE: 'yes',
        PERL_SIGNALS: 'bogus',
        PERL_HASH_SEED_DEBUG: '1',
        LC_ALL: 'xx_XX.UTF-8',
        PERL_BADLANG: undefined,
      });
      expect(out.stdout).toBe(
        'opt=-Mnosuchmodule unicode=yes badlang=unset\nno __ty_\nSigIgn:\t0000000000000000\n',
      );
      expect(out.stderr).toBe('');
      const empty = run(started(DEFAULT_SIGNALS.perl), report, [], {
        PERL5OPT: '',
        PERL_UNICODE: undefined,
        PERL_BADLANG: '',
      });
      expect(empty.stdout).toContain('opt= unicode=unset badlang=\n');
    });

    it('goes through env where it takes the option, else Perl, else runs as it is', () => {
      const viaEnv = run(CHOOSE_AND_RUN, PRINT_IGNORED);
      expect(viaEnv.stdout).toContain(`through: ${DEFAULT_SIGNALS.env.split(' ')[0]} --default`);
      expect(intOrQuitIgnored(viaEnv.stdout)).toEqual([[]]);
      const viaPerl = run(CHOOSE_AND_RUN, PRINT_IGNORED, [NO_ENV_OPTION]);
      expect(viaPerl.stdout).toContain(' /usr/bin/perl -e ');
      expect(intOrQuitIgnored(viaPerl.stdout)).toEqual([[]]);
      const neither = run(CHOOSE_AND_RUN, `${PRINT_IGNORED}; exit 3`, [NO_ENV_OPTION, NO_PERL]);
      expect(neither.stdout).toContain('through: /bin/sh -c -- ');
      expect(intOrQuitIgnored(neither.stdout)).toEqual([['SIGINT', 'SIGQUIT']]);
      expect(neither.status).toBe(3);
      const noEnv = run(CHOOSE_AND_RUN, PRINT_IGNORED, [NO_ENV]);
      expect(noEnv.stdout).toContain('through: /bin/sh -c -- ');
    });

    it('goes through env on a host whose env takes the option, else through Perl, else as it is', () => {
      expect(hostDefaultSignals()).toBe(DEFAULT_SIGNALS.env);
      expect(hostChoice([NO_ENV_OPTION])).toBe(DEFAULT_SIGNALS.perl);
      expect(hostChoice([NO_ENV_OPTION, NO_PERL])).toBe('');
      expect(hostChoice([NO_ENV])).toBe('');
    });
  },
);
