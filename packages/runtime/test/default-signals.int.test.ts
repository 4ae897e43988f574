import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  CHOOSE_DEFAULT_SIGNALS,
  DEFAULT_SIGNALS,
  hostDefaultSignals,
} from '../src/default-signals.ts';
import { shellQuote } from '../src/index.ts';
import { intOrQuitIgnored, PRINT_IGNORED } from './run-spec.ts';

/**
 * Runs `script` as `sh -c script sh COMMAND` in a mount namespace of its own, where each
 * `[from, onto]` of `binds` is mounted over `onto` first, so that a program there is not what
 * the host has.
 */
function run(script: string, command: string, binds: [string, string][] = []) {
  const mounts = binds.map(([from, onto]) => `mount --bind ${from} ${onto} && `).join('');
  const inner = `mount --make-rprivate / && ${mounts}exec /bin/sh -c "$0" sh "$1"`;
  const out = spawnSync('unshare', ['-m', '/bin/sh', '-c', inner, script, command], {
    encoding: 'utf8',
  });
  return { status: out.status, stdout: out.stdout, stderr: out.stderr };
}

/** What a container's wrapper does: it chooses, then runs "$@" with `&` and waits for it. */
const CHOOSE_AND_RUN = `${CHOOSE_DEFAULT_SIGNALS}\necho "through $1"\n(exec "$@") & wait $!`;
const NO_ENV_OPTION: [string, string] = ['/bin/false', '/usr/bin/env'];
const NO_PERL: [string, string] = ['/dev/null', '/usr/bin/perl'];

describe.runIf(process.getuid?.() === 0)(
  'a command started with SIGINT and SIGQUIT at their default',
  () => {
    it('is what a shell starts with & ignoring both, unless started through env or Perl', () => {
      const plain = run('(exec /bin/sh -c "$1") & wait $!', PRINT_IGNORED);
      expect(intOrQuitIgnored(plain.stdout)).toEqual([['SIGINT', 'SIGQUIT']]);
      for (const through of Object.values(DEFAULT_SIGNALS)) {
        const out = run(`(exec ${through} /bin/sh -c "$1") & wait $!`, `${PRINT_IGNORED}; exit 7`);
        expect(intOrQuitIgnored(out.stdout)).toEqual([[]]);
        expect(out.status).toBe(7);
      }
      const missing = run(`(exec ${DEFAULT_SIGNALS.perl} /nonexistent) & wait $!`, '');
      expect(missing.status).not.toBe(0);
      expect(missing.stderr).toContain('/nonexistent: No such file or directory');
    });

    it('goes through env where it takes the option, else Perl, else runs as it is', () => {
      const viaEnv = run(CHOOSE_AND_RUN, PRINT_IGNORED);
      expect(viaEnv.stdout).toContain('through /usr/bin/env\n');
      expect(intOrQuitIgnored(viaEnv.stdout)).toEqual([[]]);
      const viaPerl = run(CHOOSE_AND_RUN, PRINT_IGNORED, [NO_ENV_OPTION]);
      expect(viaPerl.stdout).toContain('through /usr/bin/perl\n');
      expect(intOrQuitIgnored(viaPerl.stdout)).toEqual([[]]);
      const neither = run(CHOOSE_AND_RUN, `${PRINT_IGNORED}; exit 3`, [NO_ENV_OPTION, NO_PERL]);
      expect(neither.stdout).toContain('through /bin/sh\n');
      expect(intOrQuitIgnored(neither.stdout)).toEqual([['SIGINT', 'SIGQUIT']]);
      expect(neither.status).toBe(3);
    });

    it('goes through env on a host whose env takes the option, else through Perl', () => {
      expect(hostDefaultSignals()).toBe(DEFAULT_SIGNALS.env);
      const module = fileURLToPath(new URL('../src/default-signals.ts', import.meta.url));
      const print = `import(${JSON.stringify(module)}).then((m) => console.log(m.hostDefaultSignals()))`;
      const node = [process.execPath, '--import', 'tsx', '-e', print].map(shellQuote).join(' ');
      const chosen = run(`exec ${node}`, '', [NO_ENV_OPTION]);
      expect(chosen.stdout.trim()).toBe(DEFAULT_SIGNALS.perl);
    });
  },
);
