/**
 * A seeded, deterministic generator of hostile Services and EndpointSlices
 * for the fuzz suite (test/e2e/fuzz.test.ts). Each case starts from a
 * known-good template and changes one field kpr reads: wrong types, values
 * out of range, malformed IPs and CIDRs, garbage enums, names the API server
 * refuses, oversized arrays and strings. Each carries its verdict, from the
 * API server's validation rules (what kube-apiserver refuses, kpr must refuse
 * too): "rejected" (kpr must skip the whole object, as if absent, and say so
 * in one log line) or "accepted" (valid, if odd; it must be programmed).
 *
 * The accepted objects keep a simple shape on purpose, so that what they
 * program is computed by `expectedFrontends` from first principles (ClusterIP
 * port → ready endpoints' first addresses on the slice port of the same name)
 * without kpr's planner.
 */
import { rng } from '../support/rng.js';

export type Kind = 'Service' | 'EndpointSlice';
export type Verdict = 'rejected' | 'accepted';
export type KubeObject = Record<string, any>;

export interface FuzzCase {
  /** "c0042": unique in a run; every name and address of the case derives from its index. */
  id: string;
  index: number;
  /** The kind of the hostile object. */
  kind: Kind;
  /** The field changed, as the API server names it ("spec.ports[0].port"). */
  field: string;
  /** What was done, for messages ("spec.ports[0].port = 70000"). */
  mutation: string;
  verdict: Verdict;
  /** The hostile (or odd but valid) object. */
  object: KubeObject;
  /** Good objects the case comes with: a slice for a hostile Service, the Service (and a good slice) for a hostile slice. */
  companions: KubeObject[];
  /** The template the object was made from (the mutation undone), for modify-into-bad-and-back. */
  original: KubeObject;
  /** The mutation changes what the API server treats as immutable or as the object's identity (clusterIP, name, namespace). */
  identity: boolean;
  /** Accepted, but a warning naming it is fine (a frontend conflict, an endpoint skipped alone). */
  mayWarn: boolean;
}

export const FUZZ_NAMESPACE = 'fuzz';
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

const pad = (i: number) => String(i).padStart(4, '0');

/** The case's ClusterIP: 198.19.1.0 upwards (198.19.0.0/24 is left to the suite's own Services). */
export function clusterIPv4(i: number): string {
  const n = 256 + i + 1;
  return `198.19.${n >> 8}.${n & 255}`;
}
export function clusterIPv6(i: number): string {
  return `2001:db8:19::${(i + 1).toString(16)}`;
}
/** Backend addresses: 198.18.64.0/18 (map entries only; nothing listens there). `which` 0..3. */
export function backendV4(i: number, which: number): string {
  const n = i * 4 + which + 1;
  return `198.18.${64 + (n >> 8)}.${n & 255}`;
}
export function backendV6(i: number, which: number): string {
  return `2001:db8:18:1::${(i * 4 + which + 1).toString(16)}`;
}

export interface TemplateOpts {
  family?: 'IPv4' | 'IPv6';
  type?: 'ClusterIP' | 'LoadBalancer';
}

export function goodService(i: number, o: TemplateOpts = {}): KubeObject {
  const ip = o.family === 'IPv6' ? clusterIPv6(i) : clusterIPv4(i);
  const spec: KubeObject = {
    type: o.type ?? 'ClusterIP',
    clusterIP: ip,
    clusterIPs: [ip],
    ipFamilies: [o.family ?? 'IPv4'],
    ipFamilyPolicy: 'SingleStack',
    ports: [{ name: 'http', port: 80, targetPort: 8080, protocol: 'TCP' }],
    sessionAffinity: 'None',
    internalTrafficPolicy: 'Cluster',
  };
  if (o.type === 'LoadBalancer') {
    spec.externalTrafficPolicy = 'Cluster';
    spec.ports[0].nodePort = 30000 + (i % 2700);
  }
  return { apiVersion: 'v1', kind: 'Service', metadata: { name: `fz-${pad(i)}`, namespace: FUZZ_NAMESPACE }, spec };
}

/** Slice `suffix` ("a" or "b") of the case's Service: one ready endpoint (backend 0 for "a", 1 for "b") on port http 8080. */
export function goodSlice(i: number, suffix: 'a' | 'b', o: TemplateOpts = {}): KubeObject {
  const which = suffix === 'a' ? 0 : 1;
  const addr = o.family === 'IPv6' ? backendV6(i, which) : backendV4(i, which);
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: `fz-${pad(i)}-${suffix}`, namespace: FUZZ_NAMESPACE, labels: { [SERVICE_NAME_LABEL]: `fz-${pad(i)}` } },
    addressType: o.family ?? 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: [{ addresses: [addr], conditions: { ready: true }, nodeName: 'node-1' }],
  };
}

interface Ctx {
  i: number;
  r: () => number;
}

interface Mutation {
  kind: Kind;
  field: string;
  /** Shown after "field = ". */
  label: string;
  verdict: Verdict;
  template?: TemplateOpts;
  identity?: boolean;
  /** An accepted object the agent may still warn about (a frontend conflict, an endpoint skipped alone). */
  mayWarn?: boolean;
  apply(o: KubeObject, c: Ctx): void;
}

const big = (n: number, ch = 'x') => ch.repeat(n);

/** Sets a value at a dotted path with [n] indexes ("spec.ports[0].port"), creating objects on the way. */
function setPath(o: KubeObject, path: string, v: unknown): void {
  const parts = path.replace(/\[(\d+)\]/g, '.$1').split('.');
  let cur: any = o;
  for (const p of parts.slice(0, -1)) {
    if (cur[p] === undefined) cur[p] = {};
    cur = cur[p];
  }
  cur[parts[parts.length - 1]] = v;
}

function set(kind: Kind, field: string, values: Array<[string, unknown]>, verdict: Verdict = 'rejected', extra: Partial<Mutation> = {}): Mutation[] {
  return values.map(([label, v]) => ({
    kind,
    field,
    label,
    verdict,
    ...extra,
    apply: (o) => setPath(o, field, typeof v === 'function' ? (v as () => unknown)() : structuredClone(v)),
  }));
}

const ZONED6 = 'fe80::1%eth0';

/** Every mutation, Services first. The values are the ones the API server's validation refuses, unless marked accepted. */
const MUTATIONS: Mutation[] = [
  // spec.ports
  ...set('Service', 'spec.ports', [
    ['5', 5],
    ['"80"', '80'],
    ['{port:80}', { port: 80, protocol: 'TCP' }],
    ['[]', []],
  ]),
  {
    kind: 'Service',
    field: 'spec.ports',
    label: '5,000 duplicate entries',
    verdict: 'rejected',
    apply: (o) => (o.spec.ports = Array.from({ length: 5000 }, () => ({ port: 80, protocol: 'TCP' }))),
  },
  ...set('Service', 'spec.ports[0]', [
    ['"http"', 'http'],
    ['null', null],
    ['42', 42],
    ['[80]', [80]],
  ]),
  ...set('Service', 'spec.ports[0].port', [
    ['0', 0],
    ['-1', -1],
    ['70000', 70000],
    ['80.5', 80.5],
    ['"80"', '80'],
    ['"eighty"', 'eighty'],
    ['true', true],
    ['1e20', 1e20],
    ['{}', {}],
  ]),
  ...set('Service', 'spec.ports[0].targetPort', [
    ['-1', -1],
    ['70000', 70000],
    ['8080.5', 8080.5],
    ['"bad name!"', 'bad name!'],
    ['"a-very-long-port-name"', 'a-very-long-port-name'],
    ['{}', {}],
    ['[8080]', [8080]],
  ]),
  ...set('Service', 'spec.ports[0].nodePort', [
    ['-1', -1],
    ['70000', 70000],
    ['30080.5', 30080.5],
    ['"30080"', '30080'],
    ['{}', {}],
  ]),
  ...set('Service', 'spec.healthCheckNodePort', [
    ['-1', -1],
    ['70000', 70000],
    ['1.5', 1.5],
    ['"x"', 'x'],
  ]),
  ...set('Service', 'spec.ports[0].protocol', [
    ['"tcp"', 'tcp'],
    ['"ICMP"', 'ICMP'],
    ['6', 6],
    ['["TCP"]', ['TCP']],
  ]),
  ...set('Service', 'spec.ports[0].name', [
    ['"HTTP!"', 'HTTP!'],
    ['300 chars', big(300, 'a')],
    ['5', 5],
    ['100 KB', () => big(100 * 1024, 'h')],
  ]),
  // enums
  ...set('Service', 'spec.type', [
    ['"Cluster"', 'Cluster'],
    ['"clusterip"', 'clusterip'],
    ['42', 42],
    ['{}', {}],
  ]),
  ...set('Service', 'spec.sessionAffinity', [
    ['"Sticky"', 'Sticky'],
    ['"clientip"', 'clientip'],
    ['7', 7],
  ]),
  ...set('Service', 'spec.internalTrafficPolicy', [
    ['"Everywhere"', 'Everywhere'],
    ['"local"', 'local'],
    ['3', 3],
  ]),
  ...set('Service', 'spec.externalTrafficPolicy', [
    ['"Global"', 'Global'],
    ['1', 1],
  ]),
  ...[0, -5, 86401, 'x', 1.5].map((t): Mutation => ({
    kind: 'Service',
    field: 'spec.sessionAffinityConfig.clientIP.timeoutSeconds',
    label: JSON.stringify(t),
    verdict: 'rejected',
    apply: (o) => {
      o.spec.sessionAffinity = 'ClientIP';
      o.spec.sessionAffinityConfig = { clientIP: { timeoutSeconds: t } };
    },
  })),
  // addresses
  ...[
    ['"300.1.1.1"', '300.1.1.1'],
    ['"198.19.9.9/32"', '198.19.9.9/32'],
    ['"abc"', 'abc'],
    [`"${ZONED6}"`, ZONED6],
    ['5', 5],
    ['100 KB', big(100 * 1024, '9')],
  ].map(([label, v]): Mutation => ({
    kind: 'Service',
    field: 'spec.clusterIP',
    label: String(label),
    verdict: 'rejected',
    identity: true,
    apply: (o) => {
      o.spec.clusterIP = v;
      o.spec.clusterIPs = [v];
    },
  })),
  ...set('Service', 'spec.clusterIPs', [
    ['"x" (a string)', 'x'],
    ['[5]', [5]],
    ['three entries', (c: unknown) => c],
  ]),
  ...set('Service', 'spec.ipFamilies', [
    ['1,000 entries', () => Array.from({ length: 1000 }, () => 'IPv4')],
    ['["IPv5"]', ['IPv5']],
    ['"IPv4" (a string)', 'IPv4'],
    ['["IPv6"] on an IPv4 clusterIP', ['IPv6']],
  ]),
  ...set('Service', 'spec.externalIPs', [
    ['["not-an-ip"]', ['not-an-ip']],
    ['["198.51.100.1/24"]', ['198.51.100.1/24']],
    [`["${ZONED6}"]`, [ZONED6]],
    ['"198.51.100.1" (a string)', '198.51.100.1'],
    ['[5]', [5]],
  ]),
  // (spec.loadBalancerIP is not here: kube-proxy does not read it, and the API server does not check its syntax.)
  ...set(
    'Service',
    'spec.loadBalancerSourceRanges',
    [
      ['"10.0.0.0/8" (a string)', '10.0.0.0/8'],
      ['["10.0.0.0/33"]', ['10.0.0.0/33']],
      ['["banana"]', ['banana']],
      ['[5]', [5]],
    ],
    'rejected',
    { template: { type: 'LoadBalancer' } },
  ),
  ...set(
    'Service',
    'status.loadBalancer.ingress',
    [
      ['"203.0.113.9" (a string)', '203.0.113.9'],
      ['[{ip:"bogus"}]', [{ ip: 'bogus' }]],
      [`[{ip:"${ZONED6}"}]`, [{ ip: ZONED6 }]],
      ['[{ip:5}]', [{ ip: 5 }]],
      ['[{ip, ipMode:"Garbage"}]', [{ ip: '203.0.113.9', ipMode: 'Garbage' }]],
    ],
    'rejected',
    {
      template: { type: 'LoadBalancer' },
    },
  ),
  // metadata
  ...[
    ['"fz-NNNN/x"', '/x'],
    ['unicode', '-ünï'],
    ['300 chars', `-${big(300, 'n')}`],
    ['upper case', '-UPPER'],
  ].map(([label, suffix]): Mutation => ({
    kind: 'Service',
    field: 'metadata.name',
    label,
    verdict: 'rejected',
    identity: true,
    apply: (o) => (o.metadata.name += suffix),
  })),
  ...[
    ['"fuzz/NNNN"', (i: number) => `fuzz/${pad(i)}`],
    ['unicode', (i: number) => `fuzz-ü-${pad(i)}`],
    ['300 chars', (i: number) => `n${pad(i)}${big(300, 's')}`],
  ].map(([label, ns]): Mutation => ({
    kind: 'Service',
    field: 'metadata.namespace',
    label: label as string,
    verdict: 'rejected',
    identity: true,
    apply: (o, c) => (o.metadata.namespace = (ns as (i: number) => string)(c.i)),
  })),
  ...set('Service', 'metadata.managedFields', [['5', 5]]),
  ...set('Service', 'metadata.labels', [
    ['5', 5],
    ['"app=web" (a string)', 'app=web'],
    ['["a"]', ['a']],
    ['{app:5}', { app: 5 }],
  ]),

  // EndpointSlices (the object is slice "b" of a good Service that also has a good slice "a")
  ...set('EndpointSlice', 'endpoints', [
    ['5', 5],
    ['"x"', 'x'],
    ['{}', {}],
    ['[5]', [5]],
    ['[null]', [null]],
  ]),
  {
    kind: 'EndpointSlice',
    field: 'endpoints',
    label: '1,001 entries',
    verdict: 'rejected',
    apply: (o, c) =>
      (o.endpoints = Array.from({ length: 1001 }, (_, k) => ({ addresses: [`198.18.${128 + (c.i % 64)}.${k % 250}`], conditions: { ready: true } }))),
  },
  ...set('EndpointSlice', 'endpoints[0].addresses', [
    ['"x" (a string)', 'x'],
    ['[]', []],
    ['["not-an-ip"]', ['not-an-ip']],
    ['["198.18.300.1"]', ['198.18.300.1']],
    ['[5]', [5]],
    ['["198.18.1.0/24"]', ['198.18.1.0/24']],
  ]),
  {
    kind: 'EndpointSlice',
    field: 'endpoints[0].addresses',
    label: '101 entries',
    verdict: 'rejected',
    apply: (o, c) => (o.endpoints[0].addresses = Array.from({ length: 101 }, (_, k) => `198.18.${192 + (c.i % 64)}.${k + 1}`)),
  },
  ...set('EndpointSlice', 'endpoints[0].conditions', [
    ['"yes"', 'yes'],
    ['{ready:"true"}', { ready: 'true' }],
    ['{ready:1}', { ready: 1 }],
    ['5', 5],
  ]),
  ...set('EndpointSlice', 'endpoints[0].nodeName', [
    ['5', 5],
    ['100 KB', () => big(100 * 1024, 'q')],
  ]),
  ...set('EndpointSlice', 'addressType', [
    ['"IPv7"', 'IPv7'],
    ['"ipv4"', 'ipv4'],
    ['5', 5],
  ]),
  ...set('EndpointSlice', 'ports', [
    ['5', 5],
    ['"http"', 'http'],
    ['[{port:"8080"}]', [{ name: 'http', port: '8080', protocol: 'TCP' }]],
    ['[{port:1.5}]', [{ name: 'http', port: 1.5, protocol: 'TCP' }]],
    ['[{protocol:"HTTP"}]', [{ name: 'http', port: 8080, protocol: 'HTTP' }]],
    ['[{name:"BAD!"}]', [{ name: 'BAD!', port: 8080, protocol: 'TCP' }]],
  ]),
  {
    kind: 'EndpointSlice',
    field: 'ports',
    label: '20,001 entries',
    verdict: 'rejected',
    apply: (o) => (o.ports = Array.from({ length: 20_001 }, (_, k) => ({ name: `p${k}`, port: 1 + (k % 65535), protocol: k < 65535 ? 'TCP' : 'UDP' }))),
  },
  ...[
    ['"fz-NNNN-b/x"', '/x'],
    ['unicode', '-ünï'],
    ['300 chars', `-${big(300, 'n')}`],
  ].map(([label, suffix]): Mutation => ({
    kind: 'EndpointSlice',
    field: 'metadata.name',
    label,
    verdict: 'rejected',
    identity: true,
    apply: (o) => (o.metadata.name += suffix),
  })),
  ...set('EndpointSlice', 'metadata.managedFields', [['5', 5]]),
  ...set('EndpointSlice', 'metadata.labels', [
    ['5', 5],
    ['{kubernetes.io/service-name:5}', 'LABEL5'],
  ]),

  // Odd but valid: accepted, and programmed as computed by expectedFrontends.
  {
    kind: 'Service',
    field: 'metadata.annotations',
    label: 'a 100 KB value',
    verdict: 'accepted',
    apply: (o) => (o.metadata.annotations = { 'example.com/blob': big(100 * 1024, 'b') }),
  },
  // targetPort 0 is "unset": the API server defaults it to the port.
  ...set(
    'Service',
    'spec.ports[0].targetPort',
    [
      ['"http" (a port name)', 'http'],
      ['0 (unset)', 0],
    ],
    'accepted',
  ),
  // So is an empty protocol: TCP.
  ...set('Service', 'spec.ports[0].protocol', [['"" (unset: TCP)', '']], 'accepted'),
  ...set('Service', 'spec.someFutureField', [['"x" (unknown fields are dropped)', 'x']], 'accepted'),
  {
    kind: 'Service',
    field: 'spec.sessionAffinityConfig.clientIP.timeoutSeconds',
    label: '600 (ClientIP)',
    verdict: 'accepted',
    apply: (o) => {
      o.spec.sessionAffinity = 'ClientIP';
      o.spec.sessionAffinityConfig = { clientIP: { timeoutSeconds: 600 } };
    },
  },
  {
    kind: 'Service',
    field: 'spec.ports',
    label: 'two named ports (TCP 80, UDP 53)',
    verdict: 'accepted',
    apply: (o, c) => ((o.spec.ports = [o.spec.ports[0], { name: 'dns', port: 53, targetPort: 5353, protocol: 'UDP' }]), void c),
  },
  { kind: 'Service', field: 'spec.clusterIP', label: 'IPv6', verdict: 'accepted', identity: true, template: { family: 'IPv6' }, apply: () => undefined },
  {
    kind: 'Service',
    field: 'spec.externalIPs',
    label: "[the suite's good ClusterIP] (a ClusterIP beats another Service's external IP)",
    verdict: 'accepted',
    mayWarn: true,
    apply: (o) => (o.spec.externalIPs = [GOOD_CLUSTER_IP]),
  },
  ...set(
    'EndpointSlice',
    'endpoints[0].conditions',
    [
      ['{} (nil ready is ready)', {}],
      ['{ready:false, serving:false}', { ready: false, serving: false, terminating: false }],
    ],
    'accepted',
  ),
  {
    kind: 'EndpointSlice',
    field: 'endpoints[0].addresses',
    label: 'two addresses (the first is used)',
    verdict: 'accepted',
    apply: (o, c) => o.endpoints[0].addresses.push(backendV4(c.i, 2)),
  },
  {
    kind: 'EndpointSlice',
    field: 'addressType',
    label: '"FQDN" (ignored, as kube-proxy does)',
    verdict: 'accepted',
    apply: (o) => {
      o.addressType = 'FQDN';
      o.endpoints[0].addresses = ['web.example.com'];
    },
  },
  // The API server's IP syntax has no zones: a slice holding one is refused whole.
  {
    kind: 'EndpointSlice',
    field: 'endpoints[1].addresses',
    label: `an IPv6 endpoint with a zone`,
    verdict: 'rejected',
    template: { family: 'IPv6' },
    apply: (o) => o.endpoints.push({ addresses: [`${ZONED6.replace('fe80::1', 'fe80::2')}`], conditions: { ready: true } }),
  },
  ...set('EndpointSlice', 'metadata.labels.app', [['"web" (an extra label)', 'web']], 'accepted'),
  // The API server checks only that a slice port is an int32; consumers skip one outside 1..65535 (alone).
  ...set(
    'EndpointSlice',
    'ports',
    [
      ['[{port:70000}]', [{ name: 'http', port: 70000, protocol: 'TCP' }]],
      ['[{port:-1}]', [{ name: 'http', port: -1, protocol: 'TCP' }]],
      ['[{port:0}]', [{ name: 'http', port: 0, protocol: 'TCP' }]],
    ],
    'accepted',
    { mayWarn: true },
  ),
];

/** The suite's always-served Service (real pods behind it); the ownership case points an external IP at it. */
export const GOOD_CLUSTER_IP = '198.19.0.10';

export const MUTATION_COUNT = MUTATIONS.length;

/** The few mutations whose value depends on the case (resolved here rather than in `set`). */
function fixups(m: Mutation, o: KubeObject, c: Ctx): void {
  if (m.field === 'spec.clusterIPs' && m.label === 'three entries') o.spec.clusterIPs = [o.spec.clusterIP, clusterIPv6(c.i), `198.19.250.${c.i % 250}`];
  if (m.field === 'metadata.labels' && m.kind === 'EndpointSlice' && m.label.includes('service-name')) o.metadata.labels = { [SERVICE_NAME_LABEL]: 5 };
}

function makeCase(m: Mutation, i: number, r: () => number): FuzzCase {
  const t = m.template ?? {};
  const svc = goodService(i, t);
  const sliceA = goodSlice(i, 'a', t);
  const sliceB = goodSlice(i, 'b', t);
  const original = structuredClone(m.kind === 'Service' ? svc : sliceB);
  const object = structuredClone(original);
  m.apply(object, { i, r });
  fixups(m, object, { i, r });
  const companions = m.kind === 'Service' ? [sliceA] : [svc, sliceA];
  return {
    id: `c${pad(i)}`,
    index: i,
    kind: m.kind,
    field: m.field,
    mutation: `${m.field} = ${m.label}`,
    verdict: m.verdict,
    object,
    companions,
    original,
    identity: !!m.identity,
    mayWarn: !!m.mayWarn,
  };
}

/**
 * `count` cases for `seed`: every mutation once (in a seeded order) while
 * count allows, then seeded picks. Indexes start at `firstIndex`.
 */
export function generateCases(seed: number, count: number, firstIndex = 0): FuzzCase[] {
  const r = rng(seed);
  const order = MUTATIONS.map((m) => ({ m, k: r() }))
    .sort((a, b) => a.k - b.k)
    .map((x) => x.m);
  const out: FuzzCase[] = [];
  for (let n = 0; n < count; n++) {
    const m = n < order.length ? order[n] : MUTATIONS[Math.floor(r() * MUTATIONS.length)];
    out.push(makeCase(m, firstIndex + n, r));
  }
  return out;
}

/** A rejected mutation that keeps the object's identity, to turn a good object of `kind` into a bad one in place. */
export function badVersionOf(kind: Kind, good: KubeObject, seed: number): { object: KubeObject; mutation: string } {
  const r = rng(seed);
  // Not managedFields: the server owns them, so an update changing only them is a no-op (no new version).
  const pool = MUTATIONS.filter((m) => m.kind === kind && m.verdict === 'rejected' && !m.identity && !m.template && m.field !== 'metadata.managedFields');
  const m = pool[Math.floor(r() * pool.length)];
  const object = structuredClone(good);
  m.apply(object, { i: seed, r });
  fixups(m, object, { i: seed, r });
  return { object, mutation: `${m.field} = ${m.label}` };
}

// ---- the expectation, computed from first principles ---------------------------------------

/** "ADDRESS:PORT/PROTOCOL" of a frontend or backend (IPv6 addresses bare, as `kpr service list` prints them). */
export const frontendLabel = (addr: string, port: number, proto: string) => `${addr}:${port}/${proto}`;

function isPlainIP(a: unknown, family: 'IPv4' | 'IPv6'): a is string {
  if (typeof a !== 'string') return false;
  if (family === 'IPv4') return /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.test(a) && a.split('.').every((x) => Number(x) <= 255);
  return /^[0-9a-f:]+$/i.test(a) && a.includes(':'); // no zone, no prefix
}

/**
 * What accepted objects program: for every Service, each spec port on the
 * ClusterIP gets the ready endpoints (conditions.ready true or unset) of the
 * Service's slices of its address family, first address, on the slice port
 * of the same name and protocol. External IPs that are another Service's
 * ClusterIP frontend lose to it. The objects must be the simple shapes this
 * module (and the suite) builds: no terminating endpoints, no node-local policies.
 */
export function expectedFrontends(objects: KubeObject[]): Map<string, string[]> {
  const services = objects.filter((o) => o.kind === 'Service');
  const slices = objects.filter((o) => o.kind === 'EndpointSlice');
  const out = new Map<string, string[]>();
  const backendsOf = (svc: KubeObject, family: 'IPv4' | 'IPv6', portName: string, proto: string): string[] => {
    const set = new Set<string>();
    for (const s of slices) {
      if (s.metadata.namespace !== svc.metadata.namespace || s.metadata.labels?.[SERVICE_NAME_LABEL] !== svc.metadata.name || s.addressType !== family)
        continue;
      const sp = (s.ports as KubeObject[]).find((p) => (p.name ?? '') === portName && (p.protocol || 'TCP') === proto);
      if (!sp || !(sp.port >= 1 && sp.port <= 65535)) continue;
      for (const e of s.endpoints as KubeObject[]) {
        if (e.conditions?.ready === false) continue;
        const a = e.addresses[0];
        if (isPlainIP(a, family)) set.add(`${a}:${sp.port}`);
      }
    }
    return [...set].sort();
  };
  const clusterKeys = new Set<string>();
  for (const svc of services) {
    const family = String(svc.spec.clusterIP).includes(':') ? 'IPv6' : 'IPv4';
    for (const p of svc.spec.ports) {
      const proto = p.protocol || 'TCP';
      const key = frontendLabel(svc.spec.clusterIP, p.port, proto);
      clusterKeys.add(key);
      out.set(key, backendsOf(svc, family, p.name ?? '', proto));
    }
  }
  for (const svc of services) {
    for (const ext of svc.spec.externalIPs ?? []) {
      for (const p of svc.spec.ports) {
        const proto = p.protocol || 'TCP';
        const key = frontendLabel(ext, p.port, proto);
        if (!clusterKeys.has(key)) out.set(key, backendsOf(svc, 'IPv4', p.name ?? '', proto));
      }
    }
  }
  return out;
}

// ---- matching the agent's log lines ----------------------------------------------------------

/** A log value cut short ("ns/nnnn…", at least 64 characters kept) of `key`. */
function truncationOf(v: string, key: string): boolean {
  const cut = v.endsWith('…') ? v.slice(0, -1) : v.endsWith('...') ? v.slice(0, -3) : undefined;
  return cut !== undefined && cut.length >= 64 && key.length > cut.length && key.startsWith(cut);
}

const PINO_WARN = 40;

/**
 * Whether a JSON log line is a warning naming the object ns/name: a
 * namespace and a name field, or any field whose value is "ns/name" or ends
 * with " ns/name" ("Service ns/name"), or whose object-ish value does. Loose
 * on purpose: the shape of the reflector's line is its own business.
 */
export function warnsAbout(line: Record<string, unknown>, kind: Kind, namespace: string, name: string): boolean {
  if (line.level !== PINO_WARN && line.level !== 'warn') return false;
  // A line about another kind (a slice's line may also name its Service) is not about this object.
  if (typeof line.kind === 'string' && (line.kind === 'Service' || line.kind === 'EndpointSlice') && line.kind !== kind) return false;
  if (line.namespace === namespace && line.name === name) return true;
  // "ns/name", or with a "/" or "%" inside a part percent-escaped (so that "a/b"+"c" and "a"+"b/c" differ).
  const esc = (s: string) => s.replace(/%/g, '%25').replace(/\//g, '%2F');
  const keys = [`${namespace}/${name}`, `${esc(namespace)}/${esc(name)}`];
  const otherKind = kind === 'Service' ? 'EndpointSlice' : 'Service';
  for (const v of Object.values(line)) {
    if (typeof v === 'string' && keys.some((key) => v === key || (v.endsWith(` ${key}`) && !v.startsWith(`${otherKind} `)) || truncationOf(v, key)))
      return true;
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      const o = v as Record<string, unknown>;
      if (o.namespace === namespace && o.name === name) return true;
    }
  }
  return false;
}

/** Whether a warning line says which field was wrong: a `field` property, or the mutated field's last part in its text. */
export function namesField(line: Record<string, unknown>, field: string): boolean {
  if (typeof line.field === 'string' && line.field.length > 0) return true;
  const leaf = field
    .replace(/\[\d+\]/g, '')
    .split('.')
    .pop()!;
  return JSON.stringify(line).includes(leaf);
}
