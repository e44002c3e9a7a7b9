/**
 * `kpr plan` through the real bin/kpr (no root, no BPF): manifests from
 * test/fixtures/plan/ (a directory with multi-document YAML, a JSON List, a
 * second Node and objects kpr does not use), JSON compared whole, the table
 * readable, and unparseable input an error naming the file.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { cliBin, repoRoot } from '../support/paths.js';

const run = promisify(execFile);
const fixtures = path.join(repoRoot, 'test', 'fixtures', 'plan');

async function kpr(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(cliBin, args, { cwd: repoRoot });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const be = (address: string, port: number) => ({ address, port });
const fe = (service: string, portName: string, type: string, address: string, port: number, backends: Array<{ address: string; port: number }>, extra: Record<string, unknown> = {}) => ({
  service,
  portName,
  type,
  address,
  port,
  protocol: 'TCP',
  backends,
  trafficPolicy: 'Cluster',
  affinityTimeoutSeconds: 0,
  sourceRanges: [],
  ...extra,
});

describe('kpr plan', () => {
  it('-o json: every frontend node-1 would program, and every object it skipped', async () => {
    const r = await kpr('plan', '--node', 'node-1', '-f', path.join(fixtures, 'cluster'), '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), {
      node: 'node-1',
      frontends: [
        fe('shop/api', 'http', 'ClusterIP', '10.96.0.20', 80, [be('10.0.2.1', 9090), be('10.0.2.2', 9090)]),
        // eTP=Local: outside traffic to the local endpoint only, in-node callers to all (rule 25).
        {
          ...fe('shop/api', 'http', 'NodePort', '192.168.1.10', 30080, [be('10.0.2.1', 9090)], { trafficPolicy: 'Local' }),
          internalBackends: [be('10.0.2.1', 9090), be('10.0.2.2', 9090)],
        },
        fe('shop/lb', 'https', 'ClusterIP', '10.96.0.30', 443, [be('10.0.3.1', 8443)]),
        // ipMode Proxy ingress skipped (rule 8); source ranges on the LB VIP (rule 28).
        fe('shop/lb', 'https', 'LoadBalancer', '203.0.113.7', 443, [be('10.0.3.1', 8443)], { sourceRanges: ['198.51.100.0/24'] }),
        // Ready endpoints only while there are some; affinity from the Service (rules 8, 19).
        fe('shop/web', 'http', 'ClusterIP', '10.96.0.10', 80, [be('10.0.1.1', 8080), be('10.0.1.2', 8080)], { affinityTimeoutSeconds: 600 }),
      ],
      skipped: [
        { object: 'Node node-2', reason: 'another node (planning for "node-1")' },
        { object: 'ConfigMap shop/settings', reason: 'kind "ConfigMap" is not used by kpr plan' },
        { object: 'EndpointSlice shop/orphan-abc', reason: 'no kubernetes.io/service-name label: not keyed to a Service (rule 6)' },
        { object: 'Service shop/db', reason: 'headless (no clusterIP) is not proxied' },
      ],
    });
  });

  it('another node sees other local endpoints: node-2 gets eTP=Local NodePorts on its own address', async () => {
    const r = await kpr('plan', '--node', 'node-2', '-f', path.join(fixtures, 'cluster', 'node.yaml'), '-f', path.join(fixtures, 'cluster', 'services.yaml'), '-f', path.join(fixtures, 'cluster', 'slices.json'), '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    const np = JSON.parse(r.stdout).frontends.find((f: { type: string }) => f.type === 'NodePort');
    assert.deepEqual([np.address, np.backends, np.internalBackends], ['192.168.1.20', [be('10.0.2.2', 9090)], [be('10.0.2.1', 9090), be('10.0.2.2', 9090)]]);
  });

  it('--node-port-addresses filters the node addresses NodePorts answer on', async () => {
    const r = await kpr('plan', '--node', 'node-1', '-f', path.join(fixtures, 'cluster'), '-o', 'json', '--node-port-addresses', '10.0.0.0/8');
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.equal(out.frontends.filter((f: { type: string }) => f.type === 'NodePort').length, 0);
    assert.ok(out.skipped.some((s: { reason: string }) => /NodePorts: node "node-1" has no IPv4 address/.test(s.reason)));
  });

  it('table output: one readable line per frontend, then the skipped objects', async () => {
    const r = await kpr('plan', '--node', 'node-1', '-f', path.join(fixtures, 'cluster'));
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.split('\n');
    assert.equal(lines[0], 'node node-1: 5 frontends');
    assert.match(lines[1], /^SERVICE\s+PORT\s+TYPE\s+FRONTEND\s+PROTO\s+POLICY\s+AFFINITY\s+BACKENDS$/);
    assert.match(r.stdout, /shop\/api\s+http\s+NodePort\s+192\.168\.1\.10:30080\s+TCP\s+Local\s+-\s+10\.0\.2\.1:9090 in-node: 10\.0\.2\.1:9090,10\.0\.2\.2:9090/);
    assert.match(r.stdout, /shop\/web\s+http\s+ClusterIP\s+10\.96\.0\.10:80\s+TCP\s+Cluster\s+600s\s+10\.0\.1\.1:8080,10\.0\.1\.2:8080/);
    assert.match(r.stdout, /\nskipped:\n {2}Node node-2: another node/);
  });

  it('a file that is not valid YAML is an error naming the file (non-zero exit)', async () => {
    const bad = path.join(fixtures, 'bad', 'broken.yaml');
    const r = await kpr('plan', '--node', 'node-1', '-f', path.join(fixtures, 'cluster'), '-f', bad, '-o', 'json');
    assert.notEqual(r.code, 0);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, new RegExp(`${bad.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: invalid YAML/JSON: .*line 6`));
  });

  it('a missing path is an error naming it', async () => {
    const r = await kpr('plan', '--node', 'node-1', '-f', path.join(fixtures, 'nope.yaml'));
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /nope\.yaml: no such file or directory/);
  });

  it('documents that are not objects, and Services without a name, are skipped with a reason', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-plan-'));
    writeFileSync(path.join(dir, 'odd.yaml'), '42\n---\n- a\n- b\n---\nkind: Service\nmetadata: {}\n---\n');
    const r = await kpr('plan', '--node', 'n', '-f', dir, '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.deepEqual(out.frontends, []);
    assert.deepEqual(
      out.skipped.map((s: { reason: string }) => s.reason),
      ['not a Kubernetes object (number)', 'not a Kubernetes object (a list)', 'no metadata.name'],
    );
  });

  it('--node is required', async () => {
    const r = await kpr('plan', '-f', fixtures);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /--node NAME is required/);
  });
});
