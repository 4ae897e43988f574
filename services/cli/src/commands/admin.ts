import type { Command } from 'commander';
import { ApiClient, CliError } from '../client.ts';
import { printJson, printTable } from './table.ts';

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
}
