/**
 * planService table test: one Service and its EndpointSlices → frontends.
 * Each case names the kube-proxy rule it checks (numbered in
 * docs/semantics.md).
 *
 * want.frontends lists "addr:port/PROTO portName → [ip:port, …]"; an empty
 * backend list means the frontend is kept and refuses traffic. want.skipped
 * lists "object: reason-substring" and must match the skipped list exactly
 * (same length, same order).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { planService } from '../../agent/plan/plan-service.js';
import type { ServicePlan } from '../../agent/plan/types.js';
import { ep, service, slice } from '../support/k8s-fixtures.js';

interface Case {
  name: string;
  service: V1Service;
  slices: V1EndpointSlice[];
  nodeName?: string;
  want: { frontends: Record<string, string[]>; skipped?: string[] };
}

const web = 'default/web';
const http = { name: 'http', port: 80, protocol: 'TCP' };
const dns = [
  { name: 'dns', port: 53, protocol: 'UDP' },
  { name: 'dns-tcp', port: 53, protocol: 'TCP' },
];

const cases: Case[] = [
  {
    name: 'ClusterIP service with one ready endpoint',
    service: service(web, { ports: [http] }),
    slices: [slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] })],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] } },
  },
  {
    name: 'several ports matched by name and protocol, each with its slice port number (rule 11 of docs/semantics.md)',
    service: service('kube-system/dns', { ports: dns }),
    slices: [
      slice('kube-system/dns-a', {
        ports: [
          { name: 'dns-tcp', port: 5353, protocol: 'TCP' },
          { name: 'dns', port: 5353, protocol: 'UDP' },
        ],
        endpoints: [ep('10.0.0.2'), ep('10.0.0.1')],
      }),
    ],
    want: {
      frontends: {
        '10.96.0.10:53/UDP dns': ['10.0.0.1:5353', '10.0.0.2:5353'],
        '10.96.0.10:53/TCP dns-tcp': ['10.0.0.1:5353', '10.0.0.2:5353'],
      },
    },
  },
  {
    name: 'a slice port with the right name but another protocol does not feed the port (rule 11 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'UDP' }], endpoints: [ep('10.0.0.1')] })],
    want: { frontends: { '10.96.0.10:80/TCP http': [] } },
  },
  {
    name: 'protocol "" defaults to TCP and type "" to ClusterIP (rule 10 of docs/semantics.md)',
    service: service(web, { type: '', ports: [{ name: '', port: 80, protocol: '' }] }),
    slices: [slice('default/web-a', { ports: [{ name: '', port: 8080 }], endpoints: [ep('10.0.0.1')] })],
    want: { frontends: { '10.96.0.10:80/TCP ': ['10.0.0.1:8080'] } },
  },
  {
    name: 'unnamed Service port is fed by the slice port named "" (an empty name is valid)',
    service: service(web, { ports: [{ port: 80 }] }),
    slices: [slice('default/web-a', { ports: [{ name: '', port: 9090, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] })],
    want: { frontends: { '10.96.0.10:80/TCP ': ['10.0.0.1:9090'] } },
  },
  {
    name: 'only ready endpoints; ready unset counts as ready (rule 13 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-a', {
        ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
        endpoints: [
          ep('10.0.0.1', { ready: false }),
          ep('10.0.0.2'),
          ep('10.0.0.3', { ready: true }),
          ep('10.0.0.4', { ready: false, serving: true, terminating: true }),
        ],
      }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.2:8080', '10.0.0.3:8080'] } },
  },
  {
    name: 'no ready endpoint at all, one serving and terminating: it is used (rule 19 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1', { ready: false, terminating: true })] }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] } },
  },
  {
    name: 'endpoints of two slices are unioned and sorted by address (numerically) then port (rules 16, 17 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-b', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.10'), ep('10.0.0.9')] }),
      slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.2'), ep('9.0.0.1')] }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['9.0.0.1:8080', '10.0.0.2:8080', '10.0.0.9:8080', '10.0.0.10:8080'] } },
  },
  {
    name: 'the same ip:port in two slices is one backend (rule 16 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1'), ep('10.0.0.2')] }),
      slice('default/web-b', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080', '10.0.0.2:8080'] } },
  },
  {
    name: 'duplicates: a terminating copy never replaces a ready one (rule 16 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] }),
      slice('default/web-b', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1', { ready: false, terminating: true })] }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] } },
  },
  {
    name: 'duplicates: a later non-terminating copy replaces a terminating one (rule 16 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1', { ready: false, terminating: true })] }),
      slice('default/web-b', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] } },
  },
  {
    name: 'same IP with different port numbers is not a duplicate (rule 16 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-a', { ports: [{ name: 'http', port: 80, protocol: 'TCP' }], endpoints: [ep('10.0.0.1'), ep('10.0.0.2')] }),
      slice('default/web-b', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1'), ep('10.0.0.2')] }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:80', '10.0.0.1:8080', '10.0.0.2:80', '10.0.0.2:8080'] } },
  },
  {
    name: 'a Service port with no same-named slice port has no backends (rules 11, 23 of docs/semantics.md)',
    service: service(web, { ports: [http, { name: 'metrics', port: 9100, protocol: 'TCP' }] }),
    slices: [slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] })],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'], '10.96.0.10:9100/TCP metrics': [] } },
  },
  {
    name: 'a Service without any slice keeps its frontends with no backends',
    service: service(web, { ports: [http] }),
    slices: [],
    want: { frontends: { '10.96.0.10:80/TCP http': [] } },
  },
  {
    name: 'slice port with a nil name is ignored and reported (rule 11 of docs/semantics.md)',
    service: service(web, { ports: [{ port: 80 }] }),
    slices: [slice('default/web-a', { ports: [{ port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] })],
    want: { frontends: { '10.96.0.10:80/TCP ': [] }, skipped: ['EndpointSlice default/web-a: has no name'] },
  },
  {
    name: 'slice ports with a nil or 0 port are ignored and reported (rule 11 of docs/semantics.md: "Nil port should not break anything")',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-a', {
        ports: [
          { name: 'http', protocol: 'TCP' },
          { name: 'http', port: 0, protocol: 'TCP' },
        ],
        endpoints: [ep('10.0.0.1')],
      }),
    ],
    want: {
      frontends: { '10.96.0.10:80/TCP http': [] },
      skipped: ['EndpointSlice default/web-a: invalid port null', 'EndpointSlice default/web-a: invalid port 0'],
    },
  },
  {
    name: 'a slice without ports is skipped and reported; the other slices still count',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-a', { ports: undefined, endpoints: [ep('10.0.0.9')] }),
      slice('default/web-b', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] }, skipped: ['EndpointSlice default/web-a: no ports'] },
  },
  {
    name: 'FQDN and IPv6 slices are ignored by the IPv4 plan (rule 5 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-a', { addressType: 'FQDN', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('example.com')] }),
      slice('default/web-b', { addressType: 'IPv6', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('fd00::1')] }),
      slice('default/web-c', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] } },
  },
  {
    name: 'slices without the service-name label, or of another Service, are ignored (rule 6 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [
      slice('default/web-a', { serviceName: null, ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.8')] }),
      slice('default/other-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.9')] }),
      slice('prod/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.7')] }),
      slice('default/web-b', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] } },
  },
  {
    name: 'a lone slice of another Service whose name starts like this one is ignored (rule 6 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [slice('default/webx-a', { serviceName: 'webx', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.9')] })],
    want: { frontends: { '10.96.0.10:80/TCP http': [] } },
  },
  {
    name: "a lone slice whose namespace and label join into another key is not the Service's (rule 6 of docs/semantics.md)",
    service: service(web, { ports: [http] }),
    slices: [slice('defaul/t-web-a', { serviceName: 't/web', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.9')] })],
    want: { frontends: { '10.96.0.10:80/TCP http': [] } },
  },
  {
    name: 'a lone slice of the other family feeds no IPv4 frontend (rule 5 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [slice('default/web-a', { addressType: 'IPv6', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('fd00::1')] })],
    want: { frontends: { '10.96.0.10:80/TCP http': [] } },
  },
  {
    name: 'only addresses[0] of an endpoint is used (rule 12 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1', { more: ['10.0.0.2'] })] })],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] } },
  },
  {
    name: 'endpoint addresses are normalised, so 010.000.0.1 and 10.0.0.1 are one backend (rule 12 of docs/semantics.md)',
    service: service(web, { ports: [http] }),
    slices: [slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('010.000.0.1'), ep('10.0.0.1')] })],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] } },
  },
  {
    name: 'an invalid endpoint address is skipped and reported; the others are kept',
    service: service(web, { ports: [http] }),
    slices: [slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.300'), ep('10.0.0.1')] })],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] }, skipped: ['EndpointSlice default/web-a: invalid endpoint address "10.0.0.300"'] },
  },
  {
    name: 'headless Service (clusterIP None) is skipped (rules 2, 3 of docs/semantics.md)',
    service: service(web, { clusterIP: 'None', ports: [http] }),
    slices: [slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] })],
    want: { frontends: {}, skipped: ['Service default/web: headless'] },
  },
  {
    name: 'Service with clusterIP "" is skipped (rule 3 of docs/semantics.md)',
    service: service(web, { clusterIP: '', ports: [http] }),
    slices: [],
    want: { frontends: {}, skipped: ['Service default/web: headless'] },
  },
  {
    name: 'ExternalName Service is skipped even with a clusterIP (rule 3 of docs/semantics.md)',
    service: service(web, { type: 'ExternalName', ports: [http] }),
    slices: [],
    want: { frontends: {}, skipped: ['Service default/web: ExternalName'] },
  },
  {
    name: 'Service with the service-proxy-name label belongs to another proxy (rule 1 of docs/semantics.md)',
    service: service(web, { labels: { 'service.kubernetes.io/service-proxy-name': 'other' }, ports: [http] }),
    slices: [],
    want: { frontends: {}, skipped: ['Service default/web: service.kubernetes.io/service-proxy-name'] },
  },
  {
    name: 'IPv6-only Service: its IPv6 clusterIP is fed by IPv6 slices only (rules 4, 5 of docs/semantics.md)',
    service: service(web, { clusterIP: 'fd00::10', clusterIPs: ['fd00::10'], ipFamilies: ['IPv6'], ports: [http] }),
    slices: [
      slice('default/web-a', { addressType: 'IPv6', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('fd00:0::1')] }),
      slice('default/web-b', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] }),
    ],
    want: { frontends: { 'fd00::10:80/TCP http': ['fd00::1:8080'] } },
  },
  {
    name: 'IPv6 clusterIP without ipFamilies is used in its own family (rule 4 of docs/semantics.md)',
    service: service(web, { clusterIP: 'fd00::10', ports: [http] }),
    slices: [],
    want: { frontends: { 'fd00::10:80/TCP http': [] } },
  },
  {
    name: 'dual-stack Service, IPv6 first: one frontend per family, each fed by its own slices (rules 4, 5 of docs/semantics.md)',
    service: service(web, { clusterIP: 'fd00::10', clusterIPs: ['fd00::10', '10.96.0.20'], ipFamilies: ['IPv6', 'IPv4'], ports: [http] }),
    slices: [
      slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] }),
      slice('default/web-b', { addressType: 'IPv6', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('fd00::2'), ep('10.0.0.9')] }),
      slice('default/web-c', { addressType: 'FQDN', ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('example.com')] }),
    ],
    want: {
      frontends: { 'fd00::10:80/TCP http': ['fd00::2:8080'], '10.96.0.20:80/TCP http': ['10.0.0.1:8080'] },
      skipped: ['EndpointSlice default/web-b: invalid endpoint address "10.0.0.9" in an IPv6 slice'],
    },
  },
  {
    name: 'invalid clusterIP skips the Service with the address in the reason',
    service: service(web, { clusterIP: '300.1.1.1', ports: [http] }),
    slices: [],
    want: { frontends: {}, skipped: ['Service default/web: invalid clusterIP "300.1.1.1"'] },
  },
  {
    name: 'SCTP port is programmed like a TCP one, nothing skipped (rule 39 of docs/semantics.md)',
    service: service(web, { ports: [http, { name: 'sctp', port: 9000, protocol: 'SCTP' }] }),
    slices: [
      slice('default/web-a', {
        ports: [
          { name: 'http', port: 8080, protocol: 'TCP' },
          { name: 'sctp', port: 9000, protocol: 'SCTP' },
        ],
        endpoints: [ep('10.0.0.1')],
      }),
    ],
    want: { frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'], '10.96.0.10:9000/SCTP sctp': ['10.0.0.1:9000'] }, skipped: [] },
  },
  {
    name: 'invalid port number and unknown protocol are skipped per port',
    service: service(web, { ports: [{ name: 'zero', port: 0 }, { name: 'big', port: 70000 }, { name: 'icmp', port: 1, protocol: 'ICMP' }, http] }),
    slices: [],
    want: {
      frontends: { '10.96.0.10:80/TCP http': [] },
      skipped: ['Service default/web: invalid port 0', 'Service default/web: invalid port 70000', 'Service default/web: unknown protocol "ICMP"'],
    },
  },
  {
    name: 'Service without ports has no frontends and says so',
    service: service(web, { ports: [] }),
    slices: [],
    want: { frontends: {}, skipped: ['Service default/web: no ports'] },
  },
  {
    name: 'unknown Service type is skipped',
    service: service(web, { type: 'Magic', ports: [http] }),
    slices: [],
    want: { frontends: {}, skipped: ['Service default/web: unknown type "Magic"'] },
  },
  {
    name: 'NodePort Service without a Node object: the clusterIP is programmed, the NodePorts reported (rule 29 of docs/semantics.md)',
    service: service(web, { type: 'NodePort', ports: [{ ...http, nodePort: 30080 }] }),
    slices: [slice('default/web-a', { ports: [{ name: 'http', port: 8080, protocol: 'TCP' }], endpoints: [ep('10.0.0.1')] })],
    want: {
      frontends: { '10.96.0.10:80/TCP http': ['10.0.0.1:8080'] },
      skipped: ['Service default/web: NodePorts: node "node-1" has no IPv4 address to listen on (no Node object)'],
    },
  },
];

function render(plan: ServicePlan): { frontends: Record<string, string[]>; skipped: Array<{ object: string; reason: string }> } {
  const frontends: Record<string, string[]> = {};
  for (const f of plan.frontends) frontends[`${f.address}:${f.port}/${f.protocol} ${f.portName}`] = f.backends.map((b) => `${b.address}:${b.port}`);
  return { frontends, skipped: plan.skipped };
}

describe('planService', () => {
  for (const tc of cases) {
    it(tc.name, () => {
      const plan = planService(tc.service, tc.slices, { nodeName: tc.nodeName ?? 'node-1' });
      const got = render(plan);
      const errs: string[] = [];
      if (JSON.stringify(got.frontends) !== JSON.stringify(tc.want.frontends)) {
        errs.push(`frontends: got ${JSON.stringify(got.frontends)}, want ${JSON.stringify(tc.want.frontends)}`);
      }
      const want = tc.want.skipped ?? [];
      const skippedOk =
        got.skipped.length === want.length &&
        want.every((w, i) => {
          const [object, reason] = [w.slice(0, w.indexOf(': ')), w.slice(w.indexOf(': ') + 2)];
          return got.skipped[i].object === object && got.skipped[i].reason.includes(reason);
        });
      if (!skippedOk) errs.push(`skipped: got ${JSON.stringify(got.skipped)}, want ${JSON.stringify(want)}`);
      assert.deepEqual(errs, []);
    });
  }

  it('a plain ClusterIP frontend: Cluster policy, no affinity, no source ranges, no extra fields', () => {
    const plan = planService(service(web, { ports: [http] }), [], { nodeName: 'n' });
    assert.deepEqual(plan.frontends[0], {
      service: 'default/web',
      portName: 'http',
      type: 'ClusterIP',
      address: '10.96.0.10',
      port: 80,
      protocol: 'TCP',
      backends: [],
      trafficPolicy: 'Cluster',
      affinityTimeoutSeconds: 0,
      sourceRanges: [],
    });
    assert.equal(plan.service, 'default/web');
  });

  it('never throws on malformed objects', () => {
    const bad: unknown[] = [
      {},
      { metadata: {} },
      { metadata: { namespace: 'a', name: 'b' } },
      { metadata: { namespace: 'a', name: 'b' }, spec: { clusterIP: 42 as unknown as string } },
    ];
    for (const svc of bad) {
      const plan = planService(
        svc as V1Service,
        [{ metadata: { namespace: 'a', name: 'b-1', labels: { 'kubernetes.io/service-name': 'b' } } } as unknown as V1EndpointSlice],
        { nodeName: '' },
      );
      assert.equal(plan.frontends.length, 0);
      assert.ok(plan.skipped.length > 0);
    }
    const odd = slice('default/web-a', {
      ports: [{ name: 'http', port: 8080 }],
      endpoints: [{ addresses: [] }, { addresses: undefined as unknown as string[] }],
    });
    const plan = planService(service(web, { ports: [http] }), [odd], { nodeName: '' });
    assert.deepEqual(plan.frontends[0].backends, []);
    assert.equal(plan.skipped.length, 2);
  });
});
