import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const SERVICES = ['api', 'scheduler', 'builder', 'worker', 'watchdog', 'projector', 'gateway'];

/** Each workspace package's `@trainyard/*` dependencies, by short name. */
function packageGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const dir of ['packages', 'services']) {
    for (const name of readdirSync(join(ROOT, dir))) {
      const pkg = JSON.parse(readFileSync(join(ROOT, dir, name, 'package.json'), 'utf8')) as {
        dependencies?: Record<string, string>;
      };
      graph.set(
        name,
        Object.keys(pkg.dependencies ?? {})
          .filter((d) => d.startsWith('@trainyard/'))
          .map((d) => d.slice('@trainyard/'.length))
          .sort(),
      );
    }
  }
  return graph;
}

/** The arrows of the mermaid diagram in docs/architecture.md, node names as written. */
function documentedGraph(): Map<string, string[]> {
  const doc = readFileSync(join(ROOT, 'docs', 'architecture.md'), 'utf8');
  const diagram = /```mermaid\n([\s\S]*?)```/.exec(doc)?.[1];
  if (!diagram) throw new Error('docs/architecture.md has no mermaid diagram');
  const graph = new Map<string, string[]>();
  for (const line of diagram.split('\n')) {
    const arrow = /^\s*([\w-]+)(?:\[[^\]]*\])?\s*-->\s*(.+)$/.exec(line);
    if (!arrow) continue;
    graph.set(
      arrow[1]!,
      arrow[2]!
        .split('&')
        .map((t) => t.trim())
        .sort(),
    );
  }
  return graph;
}

describe('the package graph', () => {
  it('is the one drawn in docs/architecture.md', () => {
    const actual = packageGraph();
    const drawn = documentedGraph();
    for (const [name, deps] of actual) {
      if (SERVICES.includes(name)) {
        const allowed = drawn.get('services') ?? [];
        for (const dep of deps) expect(allowed, `${name} -> ${dep}`).toContain(dep);
      } else if (name === 'stack') {
        const reachable = new Set<string>();
        const visit = (node: string) => {
          for (const next of drawn.get(node) ?? []) {
            if (next === 'services') SERVICES.forEach((s) => reachable.add(s));
            else reachable.add(next);
            visit(next);
          }
        };
        visit('stack');
        for (const dep of deps) expect([...reachable], `stack -> ${dep}`).toContain(dep);
      } else {
        expect(deps, name).toEqual(drawn.get(name) ?? []);
      }
    }
    for (const node of drawn.keys()) {
      if (node !== 'services') expect([...actual.keys()], node).toContain(node);
    }
  });

  it('is the one lint enforces', async () => {
    const { LAYERS } = (await import(pathToFileURL(join(ROOT, 'eslint.config.js')).href)) as {
      LAYERS: Record<string, string[]>;
    };
    const drawn = documentedGraph();
    const actual = packageGraph();
    for (const [pkg, allowed] of Object.entries(LAYERS)) {
      const node = SERVICES.includes(pkg) ? 'services' : pkg;
      expect([...allowed].sort(), pkg).toEqual(drawn.get(node) ?? []);
      for (const dep of actual.get(pkg) ?? []) expect(allowed, `${pkg} -> ${dep}`).toContain(dep);
    }
  });
});
