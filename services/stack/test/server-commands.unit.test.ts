import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram, standIns } from '@trainyard/cli';
import { registerOperatorCommands, registerServiceCommands } from '../src/index.ts';

/** Every command of a program, by its path (`events verify`). */
function paths(program: Command): string[] {
  const walk = (c: Command, prefix: string): string[] =>
    c.commands.flatMap((sub) => {
      const path = `${prefix}${sub.name()}`;
      return [path, ...walk(sub, `${path} `)];
    });
  return walk(program, '').sort();
}

describe('the client’s stand-ins for the server’s commands', () => {
  it('name every command the server side adds, and no other', () => {
    const server = buildProgram({ registerServiceCommands, registerOperatorCommands });
    const standing = buildProgram(standIns('', ''));
    const top = (program: Command) => program.commands.map((c) => c.name()).sort();
    expect(top(standing)).toEqual(top(server));
    const operator = (program: Command) => paths(program).filter((p) => p.startsWith('events '));
    expect(operator(standing)).toEqual(operator(server));
  });
});
