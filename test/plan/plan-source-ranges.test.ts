/**
 * The implicit loadBalancerSourceRanges allow (rule 34 of docs/semantics.md):
 * kube-proxy adds the LB IPs themselves to the allowed sources when a range
 * contains the node's (primary) IP, for clouds whose load balancers hairpin
 * the node's traffic with the LB IP as source.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1Node, V1Service } from '@kubernetes/client-node';
import { planService } from '../../agent/plan/plan-service.js';
import { primaryNodeIP, withImplicitLbAllow } from '../../agent/plan/source-ranges.js';

const NODE = 'node-1';

function node(addresses: Array<[string, string]>): V1Node {
  return { metadata: { name: NODE }, status: { addresses: addresses.map(([type, address]) => ({ type, address })) } };
}

const dualNode = node([
  ['Hostname', 'node-1'],
  ['ExternalIP', '203.0.113.10'],
  ['InternalIP', '192.168.1.10'],
  ['InternalIP', 'fd00:1::10'],
]);

function lb(ranges: string[], ips: string[], spec: Record<string, unknown> = {}): V1Service {
  return {
    metadata: { namespace: 'default', name: 'web' },
    spec: {
      type: 'LoadBalancer',
      clusterIP: '10.96.0.10',
      ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }],
      loadBalancerSourceRanges: ranges,
      ...spec,
    },
    status: { loadBalancer: { ingress: ips.map((ip) => ({ ip })) } },
  } as V1Service;
}

const byType = (s: V1Service, ctx: Record<string, unknown> = {}) =>
  planService(s, [], { nodeName: NODE, node: dualNode, nodePortAddresses: ['primary'], ...ctx }).frontends.map((f) => [f.type, f.address, f.sourceRanges]);

describe('the implicit loadBalancerSourceRanges allow (rule 34 of docs/semantics.md)', () => {
  it('a range containing the node IP allows the LB IPs themselves as sources, on every LB frontend', () => {
    assert.deepEqual(byType(lb(['192.168.1.0/24'], ['198.51.100.1', '198.51.100.2'])), [
      ['ClusterIP', '10.96.0.10', []],
      ['NodePort', '192.168.1.10', []],
      ['LoadBalancer', '198.51.100.1', ['192.168.1.0/24', '198.51.100.1/32', '198.51.100.2/32']],
      ['LoadBalancer', '198.51.100.2', ['192.168.1.0/24', '198.51.100.1/32', '198.51.100.2/32']],
    ]);
  });

  it('no range containing the node IP: the ranges as given, the LB IP is not allowed', () => {
    assert.deepEqual(byType(lb(['198.51.100.128/25'], ['198.51.100.1'])).at(-1), ['LoadBalancer', '198.51.100.1', ['198.51.100.128/25']]);
  });

  it('the node IP is the primary one (first InternalIP of the family): a range holding only the ExternalIP adds nothing', () => {
    assert.deepEqual(byType(lb(['203.0.113.0/24'], ['198.51.100.1'])).at(-1), ['LoadBalancer', '198.51.100.1', ['203.0.113.0/24']]);
    assert.equal(primaryNodeIP(dualNode, 'IPv4'), '192.168.1.10');
    assert.equal(primaryNodeIP(node([['ExternalIP', '203.0.113.10']]), 'IPv4'), '203.0.113.10', 'no InternalIP: the first ExternalIP');
    assert.equal(primaryNodeIP(node([['InternalIP', '192.168.1.10']]), 'IPv6'), undefined);
  });

  it('per family: an IPv6 range holding the node IPv6 adds the IPv6 LB IPs only', () => {
    const s = lb(['fd00:1::/64', '198.51.100.128/25'], ['198.51.100.1', 'fd00:2::1'], {
      ipFamilies: ['IPv4', 'IPv6'],
      ipFamilyPolicy: 'RequireDualStack',
      clusterIPs: ['10.96.0.10', 'fd00:96::10'],
    });
    const lbs = byType(s).filter(([t]) => t === 'LoadBalancer');
    assert.deepEqual(lbs, [
      ['LoadBalancer', '198.51.100.1', ['198.51.100.128/25']],
      ['LoadBalancer', 'fd00:2::1', ['fd00:1::/64', 'fd00:2::1/128']],
    ]);
  });

  it('no ranges: nothing is added (everyone is allowed); no Node: nothing is added', () => {
    assert.deepEqual(byType(lb([], ['198.51.100.1'])).at(-1), ['LoadBalancer', '198.51.100.1', []]);
    const noNode = planService(lb(['192.168.1.0/24'], ['198.51.100.1']), [], { nodeName: NODE });
    assert.deepEqual(noNode.frontends.at(-1)?.sourceRanges, ['192.168.1.0/24']);
  });

  it('with --source-ranges-all-external the NodePort gets the same allowed set', () => {
    const rows = byType(lb(['192.168.1.0/24'], ['198.51.100.1']), { sourceRangesForAllExternal: true });
    assert.deepEqual(rows[1], ['NodePort', '192.168.1.10', ['192.168.1.0/24', '198.51.100.1/32']]);
  });

  it('withImplicitLbAllow: no duplicates, bad input ignored', () => {
    assert.deepEqual(withImplicitLbAllow(['10.0.0.0/8', '198.51.100.1/32'], ['198.51.100.1'], '10.1.2.3'), ['10.0.0.0/8', '198.51.100.1/32']);
    assert.deepEqual(withImplicitLbAllow(['10.0.0.0/8'], ['not-an-ip'], '10.1.2.3'), ['10.0.0.0/8']);
    assert.deepEqual(withImplicitLbAllow(['10.0.0.0/8'], ['198.51.100.1'], 'junk'), ['10.0.0.0/8']);
  });
});
