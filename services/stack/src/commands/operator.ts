import type { Command } from 'commander';
import { CliError, printJson } from '@trainyard/cli';

/**
 * Operators' commands read the event log and the database directly, not through the API; an
 * `--api` given to one would be ignored, so it is refused instead.
 */
function directOnly(cmd: Command, name: string): void {
  if (cmd.optsWithGlobals<{ api?: string }>().api) {
    throw new CliError(
      `${name} reads the event log through NATS, not the API, so --api does not apply: point it at a stack with TRAINYARD_NATS_URL and DATABASE_URL, or run it where \`npm run up\` runs`,
      'NOT_THROUGH_API',
    );
  }
}

/** What `events verify` adds to a break's name. */
const BREAK_HINTS: Partial<Record<string, string>> = {
  fork: ' (two events accepted at one position: nats-server before 2.9.21, see docs/operations.md)',
  unsigned: ' (appended without a signing key: by hand, or by a process given no key)',
  'unknown-key':
    ' (signed by a key not trusted here: forged, re-signed, or a key not listed in TRAINYARD_TRUSTED_KEYS)',
  'bad-signature': ' (the signature does not match the event: changed after it was signed)',
};

/**
 * `events verify` and `projections rebuild`: they read the event log through NATS and write the
 * database directly, so they run where the server runs.
 */
export function registerOperatorCommands(program: Command): void {
  const events = program.commands.find((c) => c.name() === 'events') ?? program.command('events');
  events
    .command('verify')
    .description(
      'walk the whole event log and verify every per-aggregate hash chain and every signature',
    )
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      directOnly(cmd, 'events verify');
      const { ChainVerifier, SignatureVerifier } = await import('@trainyard/events');
      const { operatorBus, operatorConfig, trustedKeys } = await import('../env.ts');
      const config = operatorConfig();
      const keys = trustedKeys(config);
      const signatures = keys.length > 0 ? new SignatureVerifier(keys) : null;
      const bus = await operatorBus(config);
      try {
        const verifier = new ChainVerifier(signatures);
        for await (const event of bus.store.replay()) verifier.add(event);
        if (verifier.breaks.length > 0) process.exitCode = 2;
        if (o.json || events.opts<{ json?: boolean }>().json) {
          return printJson({
            events: verifier.count,
            chains: verifier.aggregates,
            trustedKeys: signatures?.size ?? 0,
            broken: verifier.breaks,
          });
        }
        for (const b of verifier.breaks) {
          console.error(
            `BROKEN ${b.aggregate}/${b.aggregateId} at seq ${b.seq}: ${b.problem}${BREAK_HINTS[b.problem] ?? ''}`,
          );
        }
        if (!signatures) {
          console.error(
            'signatures not checked: no trusted key known (run where `npm run up` runs, or set TRAINYARD_TRUSTED_KEYS)',
          );
        }
        console.log(
          `${verifier.count} events, ${verifier.aggregates} chains, ${verifier.breaks.length} broken${signatures ? `, signatures checked against ${signatures.size} trusted key${signatures.size === 1 ? '' : 's'}` : ''}`,
        );
      } finally {
        await bus.close();
      }
    });

  program
    .command('projections')
    .description('manage the read models')
    .command('rebuild')
    .description('drop the projections and rebuild them by replaying the event log')
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      directOnly(cmd, 'projections rebuild');
      const { rebuildProjections } = await import('@trainyard/projections');
      const { database, operatorBus, operatorConfig } = await import('../env.ts');
      const config = operatorConfig();
      const bus = await operatorBus(config);
      const db = await database(config).catch(async (err: unknown) => {
        await bus.close();
        throw err;
      });
      try {
        const result = await rebuildProjections(db, bus.store, {
          onProgress: (n, last) => process.stderr.write(`\rreplayed ${n} events (log at ${last})`),
        });
        process.stderr.write('\n');
        if (o.json) return printJson(result);
        console.log(
          `rebuilt from ${result.events} events up to sequence ${result.lastSeq} in ${result.ms} ms`,
        );
      } finally {
        await db.destroy();
        await bus.close();
      }
    });
}
