import { readlinkSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runInImage, testDocker } from '@trainyard/testkit';
import { DEFAULT_BASE_IMAGE } from '../src/index.ts';

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
  it('lays out /usr as the host does, its libraries once, and runs Python with them', async () => {
    const { code, output } = await runInImage(
      docker,
      DEFAULT_BASE_IMAGE,
      [
        'for d in lib bin; do readlink /$d || echo directory; done',
        'find / -xdev -name "libc.so.6" -type f | wc -l',
        'python3 -c "import ssl, ctypes; print(ssl.OPENSSL_VERSION.split()[0])"',
        'id -u nobody',
      ].join('; '),
    );
    expect(code, output).toBe(0);
    expect(output.trim().split('\n')).toEqual([
      hostLink('lib') ?? 'directory',
      hostLink('bin') ?? 'directory',
      '1',
      'OpenSSL',
      '65534',
    ]);
  });
});
