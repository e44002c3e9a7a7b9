/**
 * The agent's default interface patterns pick the pod-facing interfaces of
 * the common CNIs: veth (bridge, flannel, kindnet), lxc (Cilium), cali
 * (Calico), cni (bridge), eni (the AWS VPC CNI on EKS) and the node's
 * uplinks as external.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseAgentArgs, type AgentConfig } from '../../agent/config.js';
import { selectInterfaces } from '../../agent/datapath/interfaces.js';

const defaults = () => parseAgentArgs(['--cgroup-path', '/sys/fs/cgroup', '--node-name', 'n1'], {}) as AgentConfig;

test('default --pod-interfaces include eni* (AWS VPC CNI) beside veth*, lxc*, cali*, cni*', () => {
  assert.deepEqual(defaults().podInterfaces, ['veth*', 'lxc*', 'cali*', 'cni*', 'eni*']);
});

test('an EKS node: eth0/ens5 are external, the VPC CNI eni… interfaces face pods, lo is neither', () => {
  const cfg = defaults();
  const sel = selectInterfaces(['lo', 'eth0', 'ens5', 'eni1a2b3c4d5e6', 'enia9f8e7d6c5b', 'vlan.eth.1'], cfg.externalInterfaces, cfg.podInterfaces);
  assert.deepEqual(sel, { external: ['ens5', 'eth0'], pod: ['eni1a2b3c4d5e6', 'enia9f8e7d6c5b'] });
});

test('--pod-interfaces replaces the default list', () => {
  const cfg = parseAgentArgs(['--cgroup-path', '/sys/fs/cgroup', '--node-name', 'n1', '--pod-interfaces', 'veth*'], {}) as AgentConfig;
  assert.deepEqual(cfg.podInterfaces, ['veth*']);
});
