/**
 * Names at Kubernetes' limits, end to end: a 63-character namespace holding
 * two Services whose 63-character names differ only in the last character,
 * each with a 63-character port name (a DNS label) and its own pod. kpr
 * names frontends from kpr_svc_meta; before layout v2 it held 96 and 32
 * bytes, so both Services read as one cut name: `kpr service get` found
 * neither and kpr_service_balanced_total summed both into one series. Here,
 * through the real agent and real connections: both programmed and serving
 * their own pod, kpr_svc_meta holding the full names, `kpr service get`
 * exact for each, and each Service's counter its own on /metrics.
 */
import { scaled } from '../../sandbox/time-scale.js';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { BoxCluster } from '../../sandbox/cluster.js';
import { BpfMap } from '../../native/index.js';
import { mapPinPath } from '../../agent/datapath/pins.js';
import { mapCodecs } from '../../agent/maps/layout.js';
import { MAPS } from '../../agent/maps/registry.js';
import type { ServiceView } from '../../agent/cli/service-view.js';
import { cliBin } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';
import { endpointSlice, httpService } from '../support/e2e-objects.js';
import { parseProm, valueOf } from '../metrics/prom-text.js';

/** 63 characters, the most a namespace, a Service name or a port name (DNS labels) may have. */
const label = (stem: string, last: string) => `${stem}-${'x'.repeat(63 - stem.length - 2)}${last}`;
const NS = label('ns', '0');
const NAMES = [label('web', 'a'), label('web', 'b')];
const PORT_NAME = label('port', 'p');
const PODS = [
  { name: 'long-a', ip: '198.18.0.10' },
  { name: 'long-b', ip: '198.18.0.11' },
];
const CLUSTER_IPS = ['198.19.0.10', '198.19.0.11'];
/** Connections made to each Service: different counts, so a merged series cannot pass for either. */
const CONNECTIONS = [3, 5];

describe("names at Kubernetes' limits are never merged", { timeout: scaled(120_000) }, () => {
  let box: BoxCluster;
  let metricsUrl: string;

  function kpr(...args: string[]): { code: number | null; stdout: string; stderr: string } {
    const r = spawnSync(cliBin, args, { encoding: 'utf8', maxBuffer: 16 << 20 });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
  }

  before(async () => {
    requireRoot();
    assert.equal(NS.length, 63);
    assert.ok(NAMES.every((n) => n.length === 63) && PORT_NAME.length === 63);
    box = await BoxCluster.create({ pods: PODS });
    for (let i = 0; i < NAMES.length; i++) {
      box.api.create(httpService(NS, NAMES[i], CLUSTER_IPS[i], { ports: [{ name: PORT_NAME, port: 80, targetPort: 8080, protocol: 'TCP' }] }));
      box.api.create(endpointSlice(NS, `${NAMES[i]}-1`.slice(-63), NAMES[i], [PODS[i].ip], [{ name: PORT_NAME, port: 8080 }]));
    }
    const agent = await box.startAgent();
    metricsUrl = `http://${(await agent.waitForLog('metrics server listening')).address}/metrics`;
  });

  after(async () => {
    await box?.close();
  });

  test('both Services serve their own pod, and kpr_svc_meta holds both full names', async () => {
    for (let i = 0; i < NAMES.length; i++) {
      const rep = await box.client('http', `${CLUSTER_IPS[i]}:80`, ['--count', String(CONNECTIONS[i])]);
      assert.equal(rep.failed, 0, JSON.stringify(rep.errors));
      assert.deepEqual(rep.byPod, { [PODS[i].name]: CONNECTIONS[i] });
    }
    const m = BpfMap.openPinned(mapPinPath(box.sandbox.bpffsDir, MAPS.svcMeta.name));
    const names: string[] = [];
    try {
      const c = mapCodecs(MAPS.svcMeta);
      m.forEachBatch(64, (count, _keys, values) => {
        for (let i = 0; i < count; i++) {
          const meta = c.value.decode(values, i * c.value.size);
          names.push(`${meta.name} ${meta.portName}`);
        }
      });
    } finally {
      m.close();
    }
    assert.deepEqual(
      names.sort(),
      NAMES.map((n) => `${NS}/${n} ${PORT_NAME}`),
    );
  });

  test('kpr service get NAMESPACE/NAME finds each Service, and only its own frontend', () => {
    for (let i = 0; i < NAMES.length; i++) {
      const r = kpr('service', 'get', `${NS}/${NAMES[i]}`, '--bpffs', box.sandbox.bpffsDir, '-o', 'json');
      assert.equal(r.code, 0, r.stderr);
      const views = JSON.parse(r.stdout) as ServiceView[];
      assert.deepEqual(
        views.map((v) => `${v.service} ${v.portName} ${v.address}:${v.port} ${v.backends.map((b) => b.address).join(',')}`),
        [`${NS}/${NAMES[i]} ${PORT_NAME} ${CLUSTER_IPS[i]}:80 ${PODS[i].ip}`],
      );
    }
    // A name both share a prefix of (what the 96-byte field cut them to) is no Service.
    const cut = `${NS}/${NAMES[0]}`.slice(0, 95);
    const r = kpr('service', 'get', cut, '--bpffs', box.sandbox.bpffsDir);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /is not programmed/);
  });

  test('each Service port has its own kpr_service_balanced_total series on /metrics', async () => {
    const prom = parseProm(await (await fetch(metricsUrl)).text());
    for (let i = 0; i < NAMES.length; i++) {
      assert.equal(
        valueOf(prom, 'kpr_service_balanced_total', { namespace: NS, service: NAMES[i], port_name: PORT_NAME, protocol: 'TCP' }),
        CONNECTIONS[i],
        NAMES[i],
      );
    }
    const series = prom.filter((s) => s.name === 'kpr_service_balanced_total');
    assert.equal(series.length, NAMES.length, JSON.stringify(series));
  });
});
