/**
 * The agent's default interface patterns pick the pod-facing interfaces of
 * the common CNIs: veth (bridge, flannel, kindnet), lxc (Cilium), cali
 * (Calico), cni (bridge), eni and vlan (the AWS VPC CNI on EKS: vlan… are the
 * host sides of pods with security groups for pods, on branch ENIs) and the
 * node's uplinks as external.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseAgentArgs, type AgentConfig } from '../../agent/config/agent-config.js';
import { selectInterfaces } from '../../agent/datapath/interfaces.js';

const defaults = () => parseAgentArgs(['--cgroup-path', '/sys/fs/cgroup', '--node-name', 'n1'], {}) as AgentConfig;

test('default --pod-interfaces include eni* and vlan* (AWS VPC CNI) beside veth*, lxc*, cali*, cni*', () => {
  assert.deepEqual(defaults().podInterfaces, ['veth*', 'lxc*', 'cali*', 'cni*', 'eni*', 'vlan*']);
});

test('an EKS node: eth0/ens5 are external, the VPC CNI eni… and vlan… interfaces face pods, lo is neither', () => {
  const cfg = defaults();
  const sel = selectInterfaces(
    ['lo', 'eth0', 'ens5', 'eni1a2b3c4d5e6', 'enia9f8e7d6c5b', 'vlan5f4c8f9cdbc', 'vlan.eth.1'],
    cfg.externalInterfaces,
    cfg.podInterfaces,
  );
  // vlan5f4c8f9cdbc: the host side of a pod with its own security groups (its branch ENI's traffic);
  // vlan.eth.1, that branch ENI's VLAN device, matches too: what arrives there is the VPC's traffic to
  // that pod, in which kpr_tc_pod finds nothing of its own and passes on.
  assert.deepEqual(sel, { external: ['ens5', 'eth0'], pod: ['eni1a2b3c4d5e6', 'enia9f8e7d6c5b', 'vlan.eth.1', 'vlan5f4c8f9cdbc'] });
});

test('--pod-interfaces replaces the default list', () => {
  const cfg = parseAgentArgs(['--cgroup-path', '/sys/fs/cgroup', '--node-name', 'n1', '--pod-interfaces', 'veth*'], {}) as AgentConfig;
  assert.deepEqual(cfg.podInterfaces, ['veth*']);
});
