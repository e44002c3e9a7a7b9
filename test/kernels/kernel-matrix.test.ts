/**
 * The kernel matrix's verdicts (test/kernels/matrix.ts): a row passes, is
 * degraded with the fallback named, or fails, from the recorded test results
 * and the kernel's reported features.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KERNEL_SUITES, SLIM_SKIPS, cellFor, cellText, featuresOf, formatMatrix, legFiles, suiteOf, type KernelRun } from './matrix.js';
import type { TestRecord } from './json-reporter.js';

function rec(file: string, name: string, status: TestRecord['status'], suite = false, nesting = 1): TestRecord {
  return { file: `/repo/dist/test/${file}`, name, nesting, suite, status, ms: 1 };
}

function run(kernel: string, tests: TestRecord[], features: KernelRun['features'] = []): KernelRun {
  return { kernel, release: `${kernel}.0-test`, finished: true, seconds: 60, tests, features };
}

test('a suite path is named relative to dist/test', () => {
  assert.equal(suiteOf('/a/b/dist/test/e2e/mesh.test.js'), 'e2e/mesh.test.js');
});

test('all leaves passing on active features is a pass; a fallback the row uses makes it degraded, named', () => {
  const tests = [rec('e2e/nodeport.test.js', 'a', 'pass'), rec('e2e/nodeport.test.js', 'b', 'pass'), rec('e2e/nodeport.test.js', 'NodePort', 'pass', true, 0)];
  const plain = cellFor(run('6.12', tests, [{ name: 'tcx', state: 'active' }]), 'e2e/nodeport.test.js');
  assert.deepEqual([plain.status, plain.passed, plain.failed], ['pass', 2, 0]);
  const old = cellFor(
    run('6.1', tests, [
      { name: 'tcx', state: 'fallback', fallback: 'clsact/cls_bpf' },
      { name: 'bpf-sock-destroy', state: 'off' },
    ]),
    'e2e/nodeport.test.js',
  );
  assert.equal(old.status, 'degraded');
  assert.equal(cellText(old), 'degraded 2/2 (tcx → clsact/cls_bpf)');
});

test('one failing test fails the row; a suite that failed before any test ran counts as a failure too', () => {
  const failing = cellFor(run('5.10', [rec('e2e/clusterip.test.js', 'a', 'pass'), rec('e2e/clusterip.test.js', 'b', 'fail')]), 'e2e/clusterip.test.js');
  assert.equal(cellText(failing), 'FAIL 1/2');
  const hookFailed = cellFor(run('5.10', [rec('e2e/clusterip.test.js', 'ClusterIP', 'fail', true, 0)]), 'e2e/clusterip.test.js');
  assert.equal(hookFailed.status, 'FAIL');
  assert.equal(cellFor(run('5.10', []), 'e2e/clusterip.test.js').status, 'missing');
});

test('the preflight feature list is read leniently; the table names every kernel and lists failures', () => {
  assert.deepEqual(featuresOf({ features: [{ feature: 'tcx', state: 'fallback', fallback: 'clsact' }, { bogus: 1 }] }), [
    { name: 'tcx', state: 'fallback', fallback: 'clsact', detail: undefined },
  ]);
  assert.deepEqual(featuresOf({ checks: [] }), []);
  const text = formatMatrix(
    [run('6.1', [rec('e2e/mesh.test.js', 'hairpin', 'fail')], [{ name: 'tcx', state: 'fallback', fallback: 'clsact' }])],
    ['e2e/mesh.test.js'],
  );
  assert.match(text, /\| service-mesh mode e2e \(e2e\/mesh\) \| FAIL 0\/1 \(tcx → clsact\) \|/);
  assert.match(text, /\| tcx \| fallback: clsact \|/);
  assert.match(text, /- 6\.1: e2e\/mesh\.test\.js: hairpin/);
});

test('a test a shared helper registered is counted under the suite file whose top-level suite ran it (conformance: registerUpstream in harness.js)', async () => {
  const { default: jsonReporter } = await import('./json-reporter.js');
  const ev = (type: string, name: string, nesting: number, file: string, suite = false) => ({
    type,
    data: { name, nesting, file, details: { duration_ms: 1, ...(suite ? { type: 'suite' } : {}) } },
  });
  async function* events() {
    yield ev('test:pass', 'should serve a basic endpoint from pods', 1, '/r/dist/test/conformance/harness.js');
    yield ev('test:fail', 'should release NodePorts on delete', 1, '/r/dist/test/conformance/harness.js');
    yield ev('test:pass', 'conformance: test/e2e/network/service.go', 0, '/r/dist/test/conformance/service.test.js', true);
    yield ev('test:pass', 'a test of its own file', 0, '/r/dist/test/e2e/clusterip.test.js');
  }
  const records: TestRecord[] = [];
  for await (const line of jsonReporter(events())) records.push(JSON.parse(line) as TestRecord);
  assert.deepEqual(
    records.map((r) => suiteOf(r.file)),
    ['conformance/service.test.js', 'conformance/service.test.js', 'conformance/service.test.js', 'e2e/clusterip.test.js'],
  );
  const run: KernelRun = { kernel: '5.10', release: 'x', finished: true, seconds: 1, tests: records, features: [] };
  assert.equal(cellText(cellFor(run, 'conformance/service.test.js')), 'FAIL 1/2');
});

test('a conformance test skipped as n/a is the same on every kernel: counted apart, the row still passes; any other skip degrades it', async () => {
  const { default: jsonReporter } = await import('./json-reporter.js');
  const ev = (type: string, name: string, nesting: number, skip?: string) => ({
    type,
    data: {
      name,
      nesting,
      file: '/r/dist/test/conformance/service.test.js',
      details: { duration_ms: 1, ...(nesting === 0 ? { type: 'suite' } : {}) },
      ...(skip ? { skip } : {}),
    },
  });
  async function* events() {
    yield ev('test:pass', 'should serve a basic endpoint from pods', 1);
    yield ev('test:pass', 'should prevent NodePort collisions', 1, 'n/a: checks the API server');
    yield ev('test:pass', 'conformance: test/e2e/network/service.go', 0);
  }
  const records: TestRecord[] = [];
  for await (const line of jsonReporter(events())) records.push(JSON.parse(line) as TestRecord);
  const na = cellFor(run('5.10', records), 'conformance/service.test.js');
  assert.equal(cellText(na), 'pass 1/1 (1 n/a)');
  const otherSkip = records.map((r) => (r.notApplicable ? { ...r, notApplicable: undefined } : r));
  assert.equal(cellText(cellFor(run('5.10', otherSkip), 'conformance/service.test.js')), 'degraded 1/2 (1 skipped)');
});

test('a slim leg runs every suite but the conformance files other than conntrack.go and the live-migration suite; the other legs run them all', () => {
  const slim = legFiles('6.1', KERNEL_SUITES, ['6.1']);
  const whole = legFiles('5.10', KERNEL_SUITES, ['6.1']);
  assert.deepEqual(whole, KERNEL_SUITES);
  assert.deepEqual(
    KERNEL_SUITES.filter((f) => !slim.includes(f)),
    SLIM_SKIPS,
  );
  assert.ok(slim.includes('conformance/conntrack.test.js') && slim.includes('e2e/nodeport.test.js'));
  assert.ok(
    SLIM_SKIPS.every((f) => KERNEL_SUITES.includes(f)),
    'every skipped file is a suite of the legs',
  );
  // A skipped file's cell on the slim leg says it did not run there.
  const run: KernelRun = { kernel: '6.1', release: '6.1.0', finished: true, seconds: 1, tests: [], features: [] };
  assert.equal(cellText(cellFor(run, 'conformance/service.test.js')), 'not run');
});
