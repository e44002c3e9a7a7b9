/**
 * The operator's reference pages say what the code does, item by item:
 * - every flag `kpr-agent --help` prints (agent/config/agent-config.ts USAGE) has a row
 *   of docs/configuration.md's flag table, and every flag the agent parses
 *   (AGENT_FLAGS) is in its --help;
 * - every metric the agent exports (the registry of AgentMetrics after a
 *   scrape, plus any name a metrics module declares) is named in
 *   docs/metrics.md;
 * - every path the health and metrics servers route is in docs/metrics.md;
 * - every command of `kpr` and each of its flags is in docs/cli.md: its
 *   flag reference is generated from agent/cli/commands.ts
 *   (`node dist/test/codebase/cli-reference.js`) and must match.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { findRepoRoot } from '../../agent/runtime/paths.js';
import { AGENT_FLAGS, USAGE } from '../../agent/config/agent-config.js';
import { COMMANDS } from '../../agent/cli/commands.js';
import { AgentMetrics } from '../../agent/metrics/metrics.js';
import { createLogger } from '../../agent/log/log.js';
import { buildHealthServer } from '../../agent/health/server.js';
import { buildMetricsServer } from '../../agent/metrics/server.js';
import { ProxyHealthState } from '../../agent/health/proxy-health.js';
import { CLI_DOC, currentCliReference, renderCliReference } from './cli-reference.js';

const root = findRepoRoot();
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');

/** The first cells of a page's table rows, one string per row. */
function firstCells(text: string): string[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('|'))
    .map((l) => l.split(/(?<!\\)\|/)[1] ?? '');
}

/** The flags a usage text names: `--name` anywhere, and `-x` where a line lists one. */
export function usageFlags(usage: string): { listed: string[]; mentioned: string[] } {
  const listed = new Set<string>();
  for (const line of usage.split('\n')) {
    for (const m of line.matchAll(/^\s+(?:-([a-z]), )?(?:--([a-z0-9-]+)|-([a-z]) )/g)) {
      if (m[2]) listed.add(`--${m[2]}`);
      if (m[3]) listed.add(`-${m[3]}`);
    }
  }
  const mentioned = new Set([...usage.matchAll(/(?<![\w-])--([a-z0-9][a-z0-9-]*)/g)].map((m) => `--${m[1]}`));
  return { listed: [...listed].sort(), mentioned: [...mentioned].sort() };
}

/** Whether a page names `flag` in code: `--flag`, `--flag VALUE`, `--flag=…`. */
const namesFlag = (text: string, flag: string) => new RegExp(`\`${flag}(?![a-z0-9-])[^\`]*\``).test(text);

describe('docs/configuration.md: every flag of kpr-agent --help', () => {
  const doc = read('docs/configuration.md');
  const { listed, mentioned } = usageFlags(USAGE);

  it('--help lists every flag the agent parses', () => {
    const missing = Object.keys(AGENT_FLAGS).filter((name) => !listed.includes(name.length === 1 ? `-${name}` : `--${name}`));
    assert.deepEqual(missing, [], 'flags the agent parses but --help does not list (agent/config/agent-config.ts USAGE)');
    assert.ok(listed.length >= 40, `--help parsed into ${listed.length} flags; the parser of this test no longer reads it`);
  });

  it('each flag --help lists has a row of the flag table', () => {
    const rows = firstCells(doc);
    const missing = listed.filter((flag) => !rows.some((cellText) => namesFlag(cellText, flag)));
    assert.deepEqual(missing, [], 'flags of kpr-agent --help without a row in docs/configuration.md (first cell, in backticks)');
  });

  it("each other flag --help names (kube-proxy's spellings) is on the page", () => {
    const missing = mentioned.filter((flag) => !namesFlag(doc, flag));
    assert.deepEqual(missing, [], 'flags named by kpr-agent --help but not in docs/configuration.md');
  });
});

/** Every metric name the agent exports: its registry after a scrape, and the names its metrics modules declare. */
async function exportedMetricNames(): Promise<string[]> {
  const metrics = new AgentMetrics({ bpffsDir: path.join(root, 'build', 'no-such-bpffs'), log: createLogger('fatal' as never) });
  metrics.mapSizes({ kpr_ct: 1 });
  await metrics.text();
  const names = new Set(metrics.registry.getMetricsAsArray().map((m) => m.name));
  const dir = path.join(root, 'agent', 'metrics');
  for (const f of readdirSync(dir).filter((n) => n.endsWith('.ts'))) {
    for (const m of readFileSync(path.join(dir, f), 'utf8').matchAll(/(?:name: |hist\()'([a-z]+_[a-z0-9_]+)'/g)) names.add(m[1]);
  }
  return [...names].sort();
}

describe('docs/metrics.md: every metric and health path', () => {
  const doc = read('docs/metrics.md');

  it('names every metric the agent exports', async () => {
    const names = await exportedMetricNames();
    assert.ok(
      names.includes('kpr_syncs_total') && names.includes('kpr_datapath_translations_total') && names.includes('kpr_service_balanced_total'),
      "the registry lists kpr's metrics",
    );
    // prom-client's default process_* and nodejs_* series may be covered by one `process_*` / `nodejs_*`; kpr's and kube-proxy's are named one by one.
    const wildcards = [...doc.matchAll(/`([a-z]+_)\*`/g)].map((m) => m[1]).filter((p) => p !== 'kpr_' && p !== 'kubeproxy_');
    const missing = names.filter((n) => !new RegExp(`\`${n}(?![a-z0-9_])`).test(doc) && !wildcards.some((p) => n.startsWith(p)));
    assert.deepEqual(missing, [], 'metrics the agent exports that docs/metrics.md does not name (in backticks, in full)');
  });

  it('names every path of the health and metrics servers', async () => {
    const health = buildHealthServer({ state: new ProxyHealthState(60_000), node: () => undefined });
    const metrics = buildMetricsServer({ text: async () => '', contentType: 'text/plain' }, undefined, () => ({ version: 'test', config: {} }));
    try {
      await health.ready();
      await metrics.ready();
      const paths = [health, metrics].flatMap((app) => [...app.printRoutes({ commonPrefix: false }).matchAll(/(\/[A-Za-z0-9_/-]*) \(/g)].map((m) => m[1]));
      assert.deepEqual(
        [...new Set(paths)].sort(),
        ['/configz', '/healthz', '/livez', '/metrics', '/proxyMode'].sort(),
        "the servers' routes as this test reads them",
      );
      const missing = [...new Set(paths)].filter((p) => !doc.includes(`\`${p}\``));
      assert.deepEqual(missing, [], 'paths of the health and metrics servers that docs/metrics.md does not name');
    } finally {
      await health.close();
      await metrics.close();
    }
  });
});

describe('docs/cli.md: every command and flag of kpr', () => {
  const doc = read(CLI_DOC);

  it("the flag reference is generated from the commands' specs", () => {
    const current = currentCliReference(doc);
    assert.ok(current !== undefined, `${CLI_DOC} has the generated flag reference block`);
    assert.equal(current, renderCliReference(), 'run: node dist/test/codebase/cli-reference.js');
  });

  it('names every command outside the generated block', () => {
    const prose = doc.replace(currentCliReference(doc) ?? '', '');
    const missing = COMMANDS.map((c) => `kpr ${c.name}`).filter((c) => !new RegExp(`${c}(?![a-z-])`).test(prose));
    assert.deepEqual(missing, [], 'commands docs/cli.md does not name');
  });
});
