import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { printJson, printTable } from './table.ts';

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

/** `1h`, `30m`, `2d` or plain seconds, as seconds. */
function durationSeconds(raw: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(raw.trim());
  if (!m) throw new CliError(`--ttl takes a duration such as 30m, 1h or 2d, not "${raw}"`);
  const unit = { '': 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as '' | 's' | 'm' | 'h' | 'd'];
  return Number(m[1]) * unit;
}

/** Worker enrolment and revocation, under `trainyard worker` (admins). */
function registerWorkerAdmin(program: Command): void {
  const worker = program.commands.find((c) => c.name() === 'worker');
  if (!worker) return;
  const token = worker.command('token').description('enrolment tokens for workers (admins)');
  token
    .command('create')
    .description('issue a one-time token a worker enrols with')
    .argument('[name]', 'the worker it is for (default: any name not taken)')
    .option('--ttl <duration>', 'how long it stays valid, e.g. 30m, 1h, 2d', '1h')
    .option('--json', 'print JSON')
    .action(async (name: string | undefined, o: { ttl: string; json?: boolean }) => {
      const client = ApiClient.fromEnv();
      const issued = await client.post<{ token: string; name: string | null; expiresAt: string }>(
        '/v1/workers/tokens',
        { ...(name && { name }), ttlSeconds: durationSeconds(o.ttl) },
      );
      if (o.json) return printJson(issued);
      console.log(issued.token);
      console.error(
        `one-time token for ${issued.name ? `worker ${issued.name}` : 'a new worker'}, valid until ${issued.expiresAt}. On the worker's host:\n  trainyard worker --name ${issued.name ?? 'NAME'} --api ${client.baseUrl} --token ${issued.token}`,
      );
    });
  worker
    .command('revoke')
    .description("revoke a worker's key: it is cut off within seconds, its attempts run elsewhere")
    .argument('<name>')
    .option('--json', 'print JSON')
    .action(async (name: string, o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().request(`/v1/workers/${encodeURIComponent(name)}`, {
        method: 'DELETE',
      });
      const body = (await r.json()) as { name: string; markedLost: boolean };
      if (o.json) return printJson(body);
      console.log(
        `revoked worker ${body.name}${body.markedLost ? '; its attempts are being run elsewhere' : ''}`,
      );
    });
}

/** The event log: a job's events, chain verification, and projection rebuilds. */
export function registerAdminCommands(program: Command): void {
  registerWorkerAdmin(program);
  const events = program
    .command('events')
    .description("show a job's events; `events verify` checks every hash chain")
    .argument('[id]', 'a job id')
    .option('--json', 'print JSON')
    .action(async (id: string | undefined, o: { json?: boolean }) => {
      if (!id) {
        events.help();
        return;
      }
      const list = await ApiClient.fromEnv().json<
        { seq: number; type: string; occurredAt: string; hash: string; actor: { id: string } }[]
      >(`/v1/jobs/${encodeURIComponent(id)}/events`);
      if (o.json) return printJson(list);
      printTable(
        ['SEQ', 'TIME', 'TYPE', 'BY', 'HASH'],
        list.map((e) => [String(e.seq), e.occurredAt, e.type, e.actor.id, e.hash.slice(0, 16)]),
      );
    });

  /** `events` takes `--json` too, so commander gives it to whichever comes first. */
  const wantsJson = (o: { json?: boolean }) => o.json || events.opts<{ json?: boolean }>().json;

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
        if (wantsJson(o)) {
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

  events
    .command('keygen')
    .description(
      'make a signing key for a service or worker run on its own (TRAINYARD_SIGNING_KEY) and print the public key to trust (TRAINYARD_TRUSTED_KEYS)',
    )
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      const { EventSigner } = await import('@trainyard/events');
      const signer = EventSigner.generate();
      const key = {
        keyId: signer.keyId,
        privateKey: signer.exportPrivateKey(),
        publicKey: signer.publicKey,
      };
      if (wantsJson(o)) return printJson(key);
      console.log(`TRAINYARD_SIGNING_KEY=${key.privateKey}`);
      console.log(`TRAINYARD_TRUSTED_KEYS=${key.publicKey}`);
      console.error(
        `key ${key.keyId}: give the first line to the process that signs (keep it secret), the second to whoever runs \`events verify\``,
      );
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
