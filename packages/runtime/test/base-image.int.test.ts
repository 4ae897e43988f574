import { readlinkSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runInImage, testDocker } from '@trainyard/testkit';
import {
  BASE_RECIPE,
  BASE_RECIPE_LABEL,
  baseRecipeOf,
  DEFAULT_BASE_IMAGE,
  ensureLocalBaseImage,
} from '../src/index.ts';

const { docker } = testDocker();

/** What `/name` links to on this host, or null where it is a directory of its own. */
function hostLink(name: string): string | null {
  try {
    return readlinkSync(`/${name}`);
  } catch {
    return null;
  }
}

describe('the default base image made from this host', () => {
  it('lays out /usr as the host does, its libraries once, and runs Python and coreutils’ env with them', async () => {
    const { code, output } = await runInImage(
      docker,
      DEFAULT_BASE_IMAGE,
      [
        'for d in lib bin; do readlink /$d || echo directory; done',
        'find / -xdev -name "libc.so.6" -type f | wc -l',
        'python3 -c "import ssl, ctypes; print(ssl.OPENSSL_VERSION.split()[0])"',
        'id -u nobody',
        '/usr/bin/env --default-signal=INT,QUIT /bin/sh -c "echo env takes the option"',
      ].join('; '),
    );
    expect(code, output).toBe(0);
    expect(output.trim().split('\n')).toEqual([
      hostLink('lib') ?? 'directory',
      hostLink('bin') ?? 'directory',
      '1',
      'OpenSSL',
      '65534',
      'env takes the option',
    ]);
    expect(await baseRecipeOf(docker, DEFAULT_BASE_IMAGE)).toBe(String(BASE_RECIPE));
  });

  it('is made again where the engine holds one that an earlier recipe made, not a later one', async () => {
    /** A base whose image says that `recipe` made it. */
    async function madeBy(recipe: number) {
      const base = { ref: `trainyard-test/base-by-${recipe}:1`, hostPackages: false };
      const earlier = await docker.createContainer({
        Image: DEFAULT_BASE_IMAGE,
        Cmd: ['true'],
        Labels: { [BASE_RECIPE_LABEL]: String(recipe) },
      });
      await earlier.commit({ repo: `trainyard-test/base-by-${recipe}`, tag: '1' });
      await earlier.remove();
      expect(await baseRecipeOf(docker, base.ref)).toBe(String(recipe));
      return base;
    }
    const earlier = await madeBy(BASE_RECIPE - 1);
    const later = await madeBy(BASE_RECIPE + 1);
    try {
      expect(await ensureLocalBaseImage(docker, earlier)).toBe(true);
      expect(await baseRecipeOf(docker, earlier.ref)).toBe(String(BASE_RECIPE));
      expect(await ensureLocalBaseImage(docker, earlier)).toBe(false);
      expect(await ensureLocalBaseImage(docker, later)).toBe(false);
      expect(await baseRecipeOf(docker, later.ref)).toBe(String(BASE_RECIPE + 1));
    } finally {
      for (const { ref } of [earlier, later]) await docker.getImage(ref).remove();
    }
  });
});
