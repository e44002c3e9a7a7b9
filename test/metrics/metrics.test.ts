/**
 * The agent's metrics without a kernel: kube-proxy's change and sync metrics
 * fed by the same calls the agent makes, read back from the Prometheus text.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { KprBpfError } from '../../native/index.js';
import { ChangeTracker } from '../../agent/metrics/change-tracker.js';
import { ANNOTATION_LAST_CHANGE_TRIGGER_TIME } from '../../agent/k8s/labels.js';
import { instrumentMapErrors } from '../../agent/metrics/instrument-maps.js';
import { AgentMetrics } from '../../agent/metrics/metrics.js';
import { NETWORK_PROGRAMMING_BUCKETS, REST_CLIENT_BUCKETS, SYNC_BUCKETS } from '../../agent/metrics/buckets.js';
import { silentLogger } from '../../agent/log/log.js';
import type { SyncReport } from '../../agent/sync/sync-loop.js';
import { emptySyncResult, type SyncResult } from '../../agent/reconcile/reconciler.js';
import { parseProm, valueOf } from './prom-text.js';

const T0 = Date.parse('2024-05-01T10:00:00Z');

function result(over: Partial<SyncResult> = {}): SyncResult {
  return { ...emptySyncResult(), frontends: 3, backends: 5, ...over };
}

function report(over: Partial<SyncReport> = {}, res: Partial<SyncResult> = {}): SyncReport {
  return { trigger: 'event', full: false, services: 1, durationMs: 0.35, result: result(res), ...over };
}

const trigger = (ms: number) => ({ [ANNOTATION_LAST_CHANGE_TRIGGER_TIME]: new Date(ms).toISOString() });

describe('change tracker', () => {
  test('pending counts: slice changes one by one, services once each; cleared when applied', () => {
    const t = new ChangeTracker(new Date(T0));
    t.record({ kind: 'EndpointSlice', key: 'a/web' });
    t.record({ kind: 'EndpointSlice', key: 'a/web' });
    t.record({ kind: 'Service', key: 'a/web' });
    t.record({ kind: 'Service', key: 'a/web' });
    t.record({ kind: 'Service', key: 'a/db' });
    t.record({ kind: 'Node', key: 'node-1' });
    assert.equal(t.endpointChangesPending, 2);
    assert.equal(t.serviceChangesPending, 2);
    t.applied(new Date(T0));
    assert.equal(t.endpointChangesPending, 0);
    assert.equal(t.serviceChangesPending, 0);
  });

  test('network programming latency: from each trigger time to the sync; triggers older than the agent are ignored', () => {
    const t = new ChangeTracker(new Date(T0));
    t.record({ kind: 'EndpointSlice', key: 'a/web', annotations: trigger(T0 + 1000) });
    t.record({ kind: 'EndpointSlice', key: 'a/db', annotations: trigger(T0 + 1500) });
    t.record({ kind: 'EndpointSlice', key: 'a/old', annotations: trigger(T0 - 60_000) });
    t.record({ kind: 'EndpointSlice', key: 'a/none' });
    t.record({ kind: 'EndpointSlice', key: 'a/bad', annotations: { [ANNOTATION_LAST_CHANGE_TRIGGER_TIME]: 'yesterday' } });
    assert.deepEqual(t.applied(new Date(T0 + 2000)).sort(), [0.5, 1]);
    assert.deepEqual(t.applied(new Date(T0 + 3000)), [], 'each trigger is observed once');
  });
});

describe('agent metrics', () => {
  function metrics() {
    let now = T0;
    const m = new AgentMetrics({ bpffsDir: '/nonexistent/kpr', log: silentLogger, now: () => new Date(now) });
    return { m, at: (ms: number) => (now = ms), read: async () => parseProm(await m.text()) };
  }

  test("kube-proxy's names move as changes are queued and synced", async () => {
    const { m, at, read } = metrics();
    at(T0 + 1000);
    m.changeQueued({ kind: 'EndpointSlice', key: 'a/web', annotations: trigger(T0 + 500) });
    m.changeQueued({ kind: 'EndpointSlice', key: 'a/web' });
    m.changeQueued({ kind: 'Service', key: 'a/web' });
    let s = await read();
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_endpoint_changes_total'), 2);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_endpoint_changes_pending'), 2);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_service_changes_total'), 1);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_service_changes_pending'), 1);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds'), (T0 + 1000) / 1000);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds'), 0);

    at(T0 + 1250);
    m.syncDone(report());
    s = await read();
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_endpoint_changes_pending'), 0);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_service_changes_pending'), 0);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds'), (T0 + 1250) / 1000);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_duration_seconds_count'), 1);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_duration_seconds_sum'), 0.00035);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_duration_seconds_bucket', { le: '0.001' }), 1, "0.35 ms lands in kube-proxy's first bucket, 1 ms");
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_duration_seconds_bucket', { le: '0.0004' }), undefined, 'no bucket below 1 ms');
    assert.equal(valueOf(s, 'kubeproxy_network_programming_duration_seconds_bucket', { le: '0.5' }), 0, '0.75 s is above 0.5 s');
    assert.equal(valueOf(s, 'kubeproxy_network_programming_duration_seconds_bucket', { le: '1' }), 1);
    assert.equal(valueOf(s, 'kubeproxy_sync_partial_proxy_rules_duration_seconds_count'), 1);
    assert.equal(valueOf(s, 'kubeproxy_sync_full_proxy_rules_duration_seconds_count'), 0);
    assert.equal(valueOf(s, 'kubeproxy_network_programming_duration_seconds_count'), 1);
    assert.equal(valueOf(s, 'kubeproxy_network_programming_duration_seconds_sum'), 0.75);
    assert.equal(valueOf(s, 'kpr_syncs_total', { trigger: 'event', result: 'ok' }), 1);
    assert.equal(valueOf(s, 'kpr_frontends_programmed'), 3);
    assert.equal(valueOf(s, 'kpr_backends_programmed'), 5);
  });

  test('a failed sync keeps the changes pending and does not move the last-sync time', async () => {
    const { m, read } = metrics();
    m.changeQueued({ kind: 'EndpointSlice', key: 'a/web' });
    m.syncDone(report({}, { ok: false, error: 'E2BIG' }));
    const s = await read();
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_endpoint_changes_pending'), 1);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds'), 0);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_duration_seconds_count'), 1, 'failed syncs are timed too');
    assert.equal(valueOf(s, 'kpr_syncs_total', { trigger: 'event', result: 'error' }), 1);
  });

  test('Services over a datapath limit, by limit, as the last sync left them', async () => {
    const { m, read } = metrics();
    let s = await read();
    assert.equal(valueOf(s, 'kpr_services_over_limit', { limit: 'rev_nat_ids' }), 0, 'every limit has a series from the start');
    const over = (service: string, limit: 'rev_nat_ids' | 'backends_per_frontend') => ({ service, limit, action: 'refused' as const, capacity: 1, needed: 2 });
    m.syncDone(report({}, { limits: [over('a/x', 'rev_nat_ids'), over('b/y', 'rev_nat_ids'), over('c/z', 'backends_per_frontend')] }));
    s = await read();
    assert.equal(valueOf(s, 'kpr_services_over_limit', { limit: 'rev_nat_ids' }), 2);
    assert.equal(valueOf(s, 'kpr_services_over_limit', { limit: 'backends_per_frontend' }), 1);
    assert.equal(valueOf(s, 'kpr_services_over_limit', { limit: 'svc_map' }), 0);
    m.syncDone(report({}, { limits: [] }));
    s = await read();
    assert.equal(valueOf(s, 'kpr_services_over_limit', { limit: 'rev_nat_ids' }), 0);
  });

  test('changes the initial sync covers are counted but queue nothing', async () => {
    const { m, read } = metrics();
    m.changeQueued({ kind: 'Service', key: 'a/web' }, false);
    const s = await read();
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_service_changes_total'), 1);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds'), 0);
  });

  test('drift: inconsistencies found at adopt by kind; repairs of periodic read-backs by map and kind', async () => {
    const { m, read } = metrics();
    m.adopted({
      frontends: 1,
      backends: 2,
      serviceEntries: 3,
      inconsistencies: 3,
      details: {
        slotsWithoutMaster: 0,
        slotsBeyondCount: 1,
        missingSlots: 0,
        danglingSlots: 0,
        orphanBackends: 2,
        duplicateBackends: 0,
        badFrontendIds: 0,
        orphanAuxEntries: 0,
      },
    });
    m.syncDone(report({ trigger: 'periodic', full: true }));
    // Writes without drift (changes not synced yet) are no repair.
    m.syncDone(report({ trigger: 'periodic', full: true }, { servicesWritten: 2, backendsDeleted: 1 }));
    m.syncDone(
      report(
        { trigger: 'periodic', full: true },
        {
          servicesWritten: 2,
          drift: [
            { map: 'kpr_svc', kind: 'missing', entries: 1 },
            { map: 'kpr_svc', kind: 'changed', entries: 2 },
          ],
        },
      ),
    );
    m.syncDone(report({ trigger: 'periodic', full: true }, { ok: false, drift: [{ map: 'kpr_vip', kind: 'missing', entries: 1 }] }));
    m.syncDone(report({ trigger: 'event' }, { servicesWritten: 5 }));
    const s = await read();
    assert.equal(valueOf(s, 'kpr_drift_found_total', { kind: 'orphan_backends' }), 2);
    assert.equal(valueOf(s, 'kpr_drift_found_total', { kind: 'slots_beyond_count' }), 1);
    assert.equal(valueOf(s, 'kpr_drift_found_total', { kind: 'missing_slots' }), 0);
    assert.equal(valueOf(s, 'kpr_drift_repair_syncs_total'), 1);
    assert.equal(valueOf(s, 'kpr_drift_repaired_entries_total', { map: 'kpr_svc', kind: 'missing' }), 1);
    assert.equal(valueOf(s, 'kpr_drift_repaired_entries_total', { map: 'kpr_svc', kind: 'changed' }), 2);
    assert.equal(valueOf(s, 'kpr_drift_repaired_entries_total', { map: 'kpr_vip', kind: 'missing' }), undefined, 'a failed sync repaired nothing');
    assert.equal(valueOf(s, 'kubeproxy_sync_full_proxy_rules_duration_seconds_count'), 4);
  });

  test('health answers by code; build info', async () => {
    const { m, read } = metrics();
    m.healthServed('healthz', 200);
    m.healthServed('healthz', 503);
    m.healthServed('healthz', 503);
    m.healthServed('livez', 200);
    const s = await read();
    assert.equal(valueOf(s, 'kubeproxy_proxy_healthz_total', { code: '503' }), 2);
    assert.equal(valueOf(s, 'kubeproxy_proxy_healthz_total', { code: '200' }), 1);
    assert.equal(valueOf(s, 'kubeproxy_proxy_livez_total', { code: '200' }), 1);
    const info = s.find((x) => x.name === 'kpr_build_info')!;
    assert.equal(info.value, 1);
    assert.equal(info.labels.node_version, process.version);
    assert.match(info.labels.version, /^\d+\.\d+\.\d+/);
  });

  test('k8s watch layer: relists by kind and reason, rejected objects by kind, cache age read at scrape time', async () => {
    const { m, at, read } = metrics();
    m.relisted('Service', 'initial');
    m.relisted('Service', 'rv_backwards');
    m.relisted('Service', 'rv_backwards');
    m.objectRejected('EndpointSlice');
    const confirmed = new Date(T0);
    at(T0 + 4500);
    m.k8sCaches(() => [
      { kind: 'Service', lastConfirmed: confirmed },
      { kind: 'Node', lastConfirmed: undefined },
    ]);
    const s = await read();
    assert.equal(valueOf(s, 'kpr_k8s_relists_total', { kind: 'Service', reason: 'rv_backwards' }), 2);
    assert.equal(valueOf(s, 'kpr_k8s_relists_total', { kind: 'Service', reason: 'initial' }), 1);
    assert.equal(valueOf(s, 'kpr_k8s_objects_rejected_total', { kind: 'EndpointSlice' }), 1);
    const age = valueOf(s, 'kpr_k8s_cache_age_seconds', { kind: 'Service' })!;
    assert.equal(age, 4.5);
    assert.equal(valueOf(s, 'kpr_k8s_cache_age_seconds', { kind: 'Node' }), undefined, 'no series before the first confirmation');
  });

  test("kube-proxy's and client-go's bucket layouts, as upstream defines them", async () => {
    // pkg/proxy/metrics: ExponentialBuckets(0.001, 2, 15).
    assert.deepEqual(SYNC_BUCKETS, [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384]);
    // MergeBuckets(Linear(0.25,0.25,2), Linear(1,1,59), Linear(60,5,12), Linear(120,30,7)), after MergeBuckets' leading 0.
    const np = [
      0,
      0.25,
      0.5,
      ...Array.from({ length: 59 }, (_, i) => i + 1),
      ...Array.from({ length: 12 }, (_, i) => 60 + 5 * i),
      ...Array.from({ length: 7 }, (_, i) => 120 + 30 * i),
    ];
    assert.deepEqual(NETWORK_PROGRAMMING_BUCKETS, np);
    assert.equal(NETWORK_PROGRAMMING_BUCKETS.length, 81);
    assert.equal(NETWORK_PROGRAMMING_BUCKETS.at(-1), 300);
    assert.deepEqual(REST_CLIENT_BUCKETS, [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60]);
    // And the exposition carries exactly those `le` values (+Inf) for every kubeproxy_* histogram.
    const { m, read } = metrics();
    m.syncDone(report());
    const s = await read();
    const les = (name: string) => s.filter((x) => x.name === `${name}_bucket`).map((x) => x.labels.le);
    const str = (b: number[]) => [...b.map(String), '+Inf'];
    for (const h of [
      'kubeproxy_sync_proxy_rules_duration_seconds',
      'kubeproxy_sync_full_proxy_rules_duration_seconds',
      'kubeproxy_sync_partial_proxy_rules_duration_seconds',
    ]) {
      assert.deepEqual(les(h), str(SYNC_BUCKETS), h);
    }
    assert.deepEqual(les('kubeproxy_network_programming_duration_seconds'), str(np));
  });

  test('kubeproxy_sync_proxy_rules_no_local_endpoints_total: both policies from the start, then as the last successful sync counted', async () => {
    const { m, read } = metrics();
    let s = await read();
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total', { traffic_policy: 'internal' }), 0);
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total', { traffic_policy: 'external' }), 0);
    m.syncDone(report({ noLocalEndpoints: { internal: 2, external: 3 } }));
    m.syncDone(report({ noLocalEndpoints: { internal: 9, external: 9 } }, { ok: false, error: 'E2BIG' }));
    s = await read();
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total', { traffic_policy: 'internal' }), 2, 'a failed sync programs nothing');
    assert.equal(valueOf(s, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total', { traffic_policy: 'external' }), 3);
  });

  test("API requests as client-go's rest_client_*; watches by end reason", async () => {
    const { m, read } = metrics();
    m.apiRequest({ method: 'GET', host: '198.18.0.1:6443', code: '200', seconds: 0.003 });
    m.apiRequest({ method: 'GET', host: '198.18.0.1:6443', code: '410', seconds: 0.3 });
    m.apiRequest({ method: 'GET', host: '198.18.0.1:6443', code: '<error>' });
    m.watchStarted('Service');
    m.watchEnded('Service', 'expired');
    const s = await read();
    assert.equal(valueOf(s, 'rest_client_requests_total', { code: '200', method: 'GET', host: '198.18.0.1:6443' }), 1);
    assert.equal(valueOf(s, 'rest_client_requests_total', { code: '<error>', method: 'GET', host: '198.18.0.1:6443' }), 1);
    assert.equal(valueOf(s, 'rest_client_request_duration_seconds_count', { verb: 'GET', host: '198.18.0.1:6443' }), 2, 'a watch (no seconds) is not timed');
    assert.equal(valueOf(s, 'rest_client_request_duration_seconds_bucket', { verb: 'GET', host: '198.18.0.1:6443', le: '0.005' }), 1);
    assert.equal(valueOf(s, 'rest_client_request_duration_seconds_bucket', { verb: 'GET', host: '198.18.0.1:6443', le: '0.5' }), 2);
    assert.equal(valueOf(s, 'kpr_k8s_watches_total', { kind: 'Service' }), 1);
    assert.equal(valueOf(s, 'kpr_k8s_watch_ends_total', { kind: 'Service', reason: 'expired' }), 1);
  });

  test("Node's process_* and nodejs_* defaults, as kube-proxy exports Go's process_*", async () => {
    const { read } = metrics();
    const s = await read();
    for (const name of [
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
      'process_start_time_seconds',
      'process_open_fds',
      'nodejs_heap_size_used_bytes',
    ]) {
      assert.ok(valueOf(s, name) !== undefined, name);
    }
    assert.ok(valueOf(s, 'process_resident_memory_bytes')! > 0);
  });

  test('kpr_tc_*: the attach mode with its interface count, and attach failures as a counter, read from the attacher at scrape time', async () => {
    const { m, read } = metrics();
    let s = await read();
    assert.equal(s.filter((x) => x.name === 'kpr_tc_attached_interfaces').length, 0, 'no attacher yet: no series');
    const status = { mode: 'tc' as const, interfaces: 3, failures: 0 };
    m.tcAttacher(() => status);
    s = await read();
    assert.equal(valueOf(s, 'kpr_tc_attached_interfaces', { mode: 'tc' }), 3);
    assert.equal(valueOf(s, 'kpr_tc_attach_failures_total'), 0);
    status.failures = 2;
    status.interfaces = 2;
    s = await read();
    assert.equal(valueOf(s, 'kpr_tc_attached_interfaces', { mode: 'tc' }), 2);
    assert.equal(valueOf(s, 'kpr_tc_attach_failures_total'), 2);
    s = await read();
    assert.equal(valueOf(s, 'kpr_tc_attach_failures_total'), 2, 'counted once');
  });

  test('no pinned maps: the scrape still answers, without kernel series', async () => {
    const { read } = metrics();
    const s = await read();
    assert.equal(s.filter((x) => x.name === 'kpr_bpf_map_entries').length, 0);
  });
});

describe('map operation errors', () => {
  test('a failing map write is counted by map and operation and rethrown unchanged', () => {
    const counted: string[] = [];
    const err = new KprBpfError({ op: 'map update batch', map: 'kpr_svc', errno: 7 });
    const maps = {
      calls: 0,
      updateServices() {
        this.calls++;
        throw err;
      },
      dumpServices() {
        return [1, 2];
      },
    };
    const wrapped = instrumentMapErrors(maps, (map, op) => counted.push(`${map}|${op}`));
    assert.deepEqual(wrapped.dumpServices(), [1, 2]);
    assert.throws(
      () => wrapped.updateServices(),
      (e) => e === err,
    );
    assert.equal(maps.calls, 1, 'the method ran with its own this');
    assert.deepEqual(counted, ['kpr_svc|map update batch']);
  });
});
