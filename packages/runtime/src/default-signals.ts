import { accessSync, constants } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { shellQuote } from './shell.ts';

/**
 * The variables Perl reads as it starts that would steer it, stop it or write to the job's log:
 * switches, I/O layers, signal delivery, hashing, the locale warning.
 */
const PERL_STARTUP = [
  'PERL5OPT',
  'PERL_UNICODE',
  'PERL_SIGNALS',
  'PERL_HASH_SEED',
  'PERL_HASH_SEED_DEBUG',
  'PERL_PERTURB_KEYS',
  'PERL_BADLANG',
];

/**
 * Perl's part: the job's own values of `PERL_STARTUP` (carried past its start as `__ty_NAME`,
 * `=value` where set) put back, SIGINT and SIGQUIT at their default, then the program.
 */
const PERL_DEFAULTS = [
  `for my $name (qw(${PERL_STARTUP.join(' ')})) {`,
  '  my $was = delete $ENV{"__ty_$name"};',
  '  if (length $was) { $ENV{$name} = substr $was, 1 } else { delete $ENV{$name} }',
  '}',
  '$SIG{INT} = $SIG{QUIT} = "DEFAULT";',
  'exec { $ARGV[0] } @ARGV or die "$ARGV[0]: $!\\n";',
].join('\n');

/**
 * What a job's command starts through, followed by its program and arguments, so that it begins
 * with SIGINT and SIGQUIT at their default. A shell without job control starts what it runs
 * with `&` with both ignored, no trap undoes that, and every program it runs inherits it:
 * Python, for one, then never raises KeyboardInterrupt. An attempt's shell runs the command with
 * `&`, so that its trap hears a stop while it runs. Both are shell words, read in a shell that
 * has the job's environment; neither sets a shell variable.
 */
export const DEFAULT_SIGNALS = {
  /** coreutils' `env`, 8.31 and later. */
  env: '/usr/bin/env --default-signal=INT,QUIT',
  /**
   * Perl, where `env` takes no such option (busybox's, older coreutils'), started with none of
   * the job's `PERL_STARTUP` variables, which it puts back before it starts the program.
   */
  perl: [
    '/usr/bin/env',
    ...PERL_STARTUP.filter((name) => name !== 'PERL_BADLANG').map((name) => `-u ${name}`),
    'PERL_BADLANG=0',
    ...PERL_STARTUP.map((name) => `"__ty_${name}=\${${name}+=$${name}}"`),
    `/usr/bin/perl -e ${shellQuote(PERL_DEFAULTS)}`,
  ].join(' '),
} as const;

/** How a job's command (in `$var`) is started: its shell, after one of `DEFAULT_SIGNALS`. */
export const commandShell = (through: string, variable: string) =>
  `${through ? `${through} ` : ''}/bin/sh -c -- "$${variable}"`;

let onHost: string | undefined;

/**
 * The one of `DEFAULT_SIGNALS` this host has: `env` where it takes the option, else Perl where
 * there are `/usr/bin/perl` and an `env`, else nothing (the command then starts with the two
 * ignored).
 */
export function hostDefaultSignals(): string {
  if (onHost !== undefined) return onHost;
  const probe = spawnSync('/bin/sh', ['-c', `${DEFAULT_SIGNALS.env} /bin/sh -c :`], {
    stdio: 'ignore',
  });
  if (probe.status === 0) return (onHost = DEFAULT_SIGNALS.env);
  const perl = ['/usr/bin/perl', '/usr/bin/env'].every(executable) ? DEFAULT_SIGNALS.perl : '';
  // A probe that could not start says nothing of the host: the next attempt asks again.
  if (!probe.error) onHost = perl;
  return perl;
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Shell lines, for an image that may have either or neither, that make the positional
 * parameters the command in `$1` started through the first of `DEFAULT_SIGNALS` that works
 * there (one with neither runs it as it is).
 */
export const CHOOSE_DEFAULT_SIGNALS = [
  `if ${DEFAULT_SIGNALS.env} /bin/sh -c : 2>/dev/null; then`,
  `  set -- ${commandShell(DEFAULT_SIGNALS.env, '1')}`,
  'elif [ -x /usr/bin/perl ] && [ -x /usr/bin/env ]; then',
  `  set -- ${commandShell(DEFAULT_SIGNALS.perl, '1')}`,
  `else set -- ${commandShell('', '1')}; fi`,
].join('\n');
