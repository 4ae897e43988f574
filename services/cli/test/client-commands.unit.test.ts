import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { buildProgram, clientCommands } from '../src/main.ts';
import { CLIENT_ONLY, standIns } from '../src/server.ts';

describe('the commands the bundled client runs', () => {
  const commands = clientCommands();

  it('are the client’s own: submitting, reading, sessions, keys and the ssh helper', () => {
    for (const name of ['login', 'submit', 'ls', 'logs', 'session', 'ssh', 'askpass', 'ssh-key'])
      expect(commands).toContain(name);
  });

  it('leave out what the server side makes or adds to, and what reads the whole program', () => {
    for (const name of ['up', 'nats', 'api', 'scheduler', 'worker', 'events', 'projections'])
      expect(commands).not.toContain(name);
    expect(commands).not.toContain('completion');
  });

  it('hold the same subcommands with the server side as without it', () => {
    const alone = buildProgram(CLIENT_ONLY).commands;
    const served = buildProgram(standIns('', '')).commands;
    for (const name of commands) {
      const names = (list: typeof alone) =>
        list
          .find((c) => c.name() === name || c.aliases().includes(name))!
          .commands.map((c) => c.name());
      expect(names(served)).toEqual(names(alone));
    }
  });

  it('say the version of the package they come in', () => {
    const manifest = new URL('../package.json', import.meta.url);
    const { version } = JSON.parse(readFileSync(manifest, 'utf8')) as { version: string };
    expect(buildProgram(CLIENT_ONLY).version()).toBe(version);
  });
});
