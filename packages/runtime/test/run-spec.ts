import { join } from 'node:path';
import { shellQuote, type RunSpec } from '../src/index.ts';

let runs = 0;

/** A run of `command` in `dir`, its files numbered so that no two runs share one. */
export function runSpecIn(dir: string, command: string, over: Partial<RunSpec> = {}): RunSpec {
  runs++;
  return {
    logFile: join(dir, `run-${runs}.log`),
    exitFile: join(dir, `run-${runs}.exit`),
    pidFile: join(dir, `run-${runs}.pid`),
    scriptFile: join(dir, `run-${runs}.sh`),
    launchFile: join(dir, `run-${runs}.launch`),
    resultFile: join(dir, `run-${runs}.result`),
    jobId: 'job_1',
    attemptId: 'att_1',
    attempt: 1,
    command,
    env: {},
    workDir: dir,
    outputDir: join(dir, 'out'),
    gpus: [],
    ...over,
  };
}

/**
 * A command whose program takes `seconds` to save `file` once it hears SIGTERM, under a shell
 * that SIGTERM ends at once (`; true` keeps the shell from handing itself over to it).
 */
export function savesOnTerm(file: string, seconds = 0.5): string {
  const program = [
    '$| = 1;',
    `$SIG{TERM} = sub { select undef, undef, undef, ${seconds};`,
    'open my $f, ">", $ARGV[0] or die; print $f "saved\\n"; close $f; exit 0 };',
    'print "ready\\n"; sleep 30; exit 1',
  ].join(' ');
  return `perl -e ${shellQuote(program)} ${shellQuote(file)}; true`;
}

/** A command whose program ignores SIGTERM, under a shell that SIGTERM ends; it prints its pid. */
const IGNORER = `'$| = 1; $SIG{TERM} = "IGNORE"; print "$$\\n"; sleep 30'`;
export const IGNORES_TERM = `/usr/bin/perl -e ${IGNORER}; true`;
/** The same program as the command's own process, so that the script waits for it to end. */
export const IGNORES_TERM_ALONE = `exec /usr/bin/perl -e ${IGNORER}`;

/** A command line that prints the mask of the signals its process ignores (`SigIgn:`). */
export const PRINT_IGNORED = "grep '^SigIgn:' /proc/self/status";

/** For each `SigIgn:` line in `text`, which of SIGINT and SIGQUIT its process ignored. */
export function intOrQuitIgnored(text: string): string[][] {
  return [...text.matchAll(/^SigIgn:\s*([0-9a-f]+)$/gm)].map(([, mask]) => {
    const ignored = BigInt(`0x${mask}`);
    return (
      [
        ['SIGINT', 2n],
        ['SIGQUIT', 3n],
      ] as const
    )
      .filter(([, signo]) => (ignored >> (signo - 1n)) & 1n)
      .map(([name]) => name);
  });
}
