/**
 * The KPR_TEST_MAP_CAPACITIES test knob (agent/config/agent-config.ts): parsed from the
 * environment, absent by default, a typo refused with the keys it knows.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseAgentArgs, type AgentConfig } from '../../agent/config/agent-config.js';

const args = ['--cgroup-path', '/sys/fs/cgroup', '--node-name', 'n1'];

test('KPR_TEST_MAP_CAPACITIES: unset by default, parsed when set, a bad entry refused', () => {
  assert.equal((parseAgentArgs(args, {}) as AgentConfig).testMapCapacities, undefined);
  assert.deepEqual((parseAgentArgs(args, { KPR_TEST_MAP_CAPACITIES: 'svc=40, backend=30' }) as AgentConfig).testMapCapacities, { svc: 40, backend: 30 });
  assert.throws(
    () => parseAgentArgs(args, { KPR_TEST_MAP_CAPACITIES: 'vip=3' }),
    /invalid KPR_TEST_MAP_CAPACITIES entry "vip=3" .*keys: svc, backend, affinityMatch, srcRange/,
  );
  assert.throws(() => parseAgentArgs(args, { KPR_TEST_MAP_CAPACITIES: 'svc=-1' }), /invalid KPR_TEST_MAP_CAPACITIES/);
});
