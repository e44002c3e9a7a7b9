/**
 * kpr_service_*_total: the per-frontend datapath counters as Prometheus
 * series per Service port (service-stats.ts), read from the pins at scrape
 * time. Only ports with a non-zero counter have series; at most
 * SERVICE_SERIES_LIMIT ports (sorted by name) get their own, the rest are
 * summed into namespace="_other", service="_other".
 */
import { Counter, type Registry } from 'prom-client';
import { BpfMap } from '../../native/index.js';
import { mapPinPath } from '../datapath/pins.js';
import { MAP_NAMES } from '../maps/layout.js';
import type { Logger } from '../log/log.js';
import { countsByServicePort, readFrontendCounts, readFrontendNames } from './service-stats.js';

/** Service ports with series of their own (each has up to 1 + 1 + 3 series). */
export const SERVICE_SERIES_LIMIT = 5000;

const LABELS = ['namespace', 'service', 'port_name', 'protocol'];

function withPin<T>(bpffsDir: string, name: string, f: (m: BpfMap) => T): T {
  const m = BpfMap.openPinned(mapPinPath(bpffsDir, name));
  try {
    return f(m);
  } finally {
    m.close();
  }
}

/** Registers the counters; the returned function refreshes them from the pinned maps. */
export function serviceCounters(registry: Registry, bpffsDir: string, log: Logger, limit = SERVICE_SERIES_LIMIT): () => void {
  const registers = [registry];
  const balanced = new Counter({
    name: 'kpr_service_balanced_total',
    help: 'New connections (socket path; unconnected UDP: datagrams) and new flows (tc path) sent to a backend, per Service port.',
    labelNames: LABELS,
    registers,
  });
  const refused = new Counter({
    name: 'kpr_service_refused_total',
    help: 'Socket calls to a Service port refused with EPERM, by reason (no_endpoint).',
    labelNames: [...LABELS, 'reason'],
    registers,
  });
  const dropped = new Counter({
    name: 'kpr_service_dropped_total',
    help: 'New flows to a Service port dropped on the tc path, by reason (no_endpoint, no_local_endpoint, source_range).',
    labelNames: [...LABELS, 'reason'],
    registers,
  });
  return () => {
    let ports;
    try {
      const counts = withPin(bpffsDir, MAP_NAMES.svcStats, readFrontendCounts);
      const names = counts.size ? withPin(bpffsDir, MAP_NAMES.svcMeta, readFrontendNames) : new Map();
      ports = countsByServicePort(counts, names, limit);
    } catch (err) {
      log.debug('cannot read kpr_svc_stats for metrics', { error: (err as Error).message });
      return;
    }
    // They mirror kernel totals: reset, then set the current totals.
    balanced.reset();
    refused.reset();
    dropped.reset();
    for (const p of ports) {
      const l = { namespace: p.namespace, service: p.service, port_name: p.portName, protocol: p.protocol };
      const c = p.counts;
      if (c.balanced) balanced.inc(l, Number(c.balanced));
      if (c.refused) refused.inc({ ...l, reason: 'no_endpoint' }, Number(c.refused));
      if (c.droppedNoEndpoint) dropped.inc({ ...l, reason: 'no_endpoint' }, Number(c.droppedNoEndpoint));
      if (c.droppedNoLocalEndpoint) dropped.inc({ ...l, reason: 'no_local_endpoint' }, Number(c.droppedNoLocalEndpoint));
      if (c.droppedSourceRange) dropped.inc({ ...l, reason: 'source_range' }, Number(c.droppedSourceRange));
    }
  };
}
