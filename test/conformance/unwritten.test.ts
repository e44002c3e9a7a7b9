/**
 * Conformance: the upstream files (upstream-tests.ts) with no test written
 * yet, kubernetes/kubernetes test/e2e/network/kube_proxy.go and loadbalancer.go. Their entries are registered here, so every run shows
 * them: each `todo` as a node:test todo, each `n/a` as a skip with its reason.
 * A file moves to its own <file>.test.ts with its first written test.
 */
import { describe } from 'node:test';
import { registerUpstream } from './harness.js';
import { UPSTREAM_TESTS, type UpstreamFile } from './upstream-tests.js';

const UNWRITTEN: UpstreamFile[] = ['kube_proxy.go', 'loadbalancer.go'];

for (const file of UNWRITTEN) {
  describe(`conformance: test/e2e/network/${file} (no test written yet)`, () => {
    registerUpstream(file, {});
  });
}

// A file listed here must have nothing to run: once one of its entries passes, it needs its own suite.
for (const e of UPSTREAM_TESTS) {
  if (UNWRITTEN.includes(e.file) && (e.status === 'pass' || e.status === 'difference')) throw new Error(`${e.file} "${e.name}" is ${e.status}: give ${e.file} its own conformance suite`);
}
