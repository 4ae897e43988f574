import { spawnSync } from 'node:child_process';
import { shellQuote } from './shell.ts';

/**
 * What a job's command starts through, followed by its program and arguments, so that it begins
 * with SIGINT and SIGQUIT at their default. A shell without job control starts what it runs
 * with `&` with both ignored, no trap undoes that, and every program it runs inherits it:
 * Python, for one, then never raises KeyboardInterrupt, and `timeout -s INT` stops nothing. An
 * attempt's shell runs the command with `&`, so that its trap hears a stop while it runs.
 */
export const DEFAULT_SIGNALS = {
  /** coreutils' `env`, 8.31 and later. */
  env: '/usr/bin/env --default-signal=INT,QUIT',
  /** Perl, where `env` takes no such option (busybox's, older coreutils'). */
  perl: `/usr/bin/perl -e ${shellQuote(
    '$SIG{INT} = $SIG{QUIT} = "DEFAULT"; exec { $ARGV[0] } @ARGV or die "$ARGV[0]: $!\\n"',
  )}`,
} as const;

let onHost: string | undefined;

/** The one of `DEFAULT_SIGNALS` this host has: `env` where it takes the option, else Perl. */
export function hostDefaultSignals(): string {
  onHost ??=
    spawnSync('/bin/sh', ['-c', `${DEFAULT_SIGNALS.env} /bin/sh -c :`], { stdio: 'ignore' })
      .status === 0
      ? DEFAULT_SIGNALS.env
      : DEFAULT_SIGNALS.perl;
  return onHost;
}

/**
 * Shell lines, for an image that may have either or neither, that make the positional
 * parameters `/bin/sh -c "$1"` started through the first of `DEFAULT_SIGNALS` that works there
 * (one with neither runs it as it is).
 */
export const CHOOSE_DEFAULT_SIGNALS = [
  `if ${DEFAULT_SIGNALS.env} /bin/sh -c : 2>/dev/null; then set -- ${DEFAULT_SIGNALS.env} /bin/sh -c "$1"`,
  `elif [ -x /usr/bin/perl ]; then set -- ${DEFAULT_SIGNALS.perl} /bin/sh -c "$1"`,
  'else set -- /bin/sh -c "$1"; fi',
].join('\n');
