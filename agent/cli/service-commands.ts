/**
 * `kpr service list` and `kpr service get NAMESPACE/NAME`: the service,
 * backend and service-name maps joined (service-view.ts), read in one batch
 * each.
 */
import { existsSync } from 'node:fs';
import type { BpfMap } from '../../native/index.js';
import { mapPinPath } from '../datapath/pins.js';
import { mapCodecs } from '../maps/layout.js';
import { MAPS, MAP_NAMES, type MapSpec } from '../maps/registry.js';
import { CliError, UsageError, openPinnedMap } from './pinned-maps.js';
import { readFrontendCounts } from '../metrics/service-stats.js';
import { BackendBatch, formatServiceTable, joinTables, tablesFromBatch, type RawBatch, type ServiceTables, type ServiceView } from './service-view.js';
import { serviceJson } from './service-json.js';
import { parseIP } from '../net/ip.js';
import { parseEndpoint } from './trace.js';

/** Every entry of a registry map, decoded with its codecs. */
function readAll<K, V>(map: BpfMap, spec: MapSpec<K, V>): Array<[K, V]> {
  const c = mapCodecs(spec);
  const { count, keys, values } = readWhole(map);
  const out: Array<[K, V]> = new Array(count);
  for (let i = 0; i < count; i++) out[i] = [c.key.decode(keys, i * c.key.size), c.value.decode(values, i * c.value.size)];
  return out;
}

/** A whole map as one raw batch, with room for max_entries from the start (no regrowth: BpfMap.lookupBatch). */
function readWhole(map: BpfMap): RawBatch {
  return map.lookupBatch(map.maxEntries);
}

function withMap<T>(bpffsDir: string, name: string, f: (m: BpfMap) => T): T {
  const m = openPinnedMap(bpffsDir, name);
  try {
    return f(m);
  } finally {
    m.close();
  }
}

/** The service, backend, name and counter maps, read and indexed for the join. */
export function readServiceTables(bpffsDir: string): ServiceTables {
  // kpr_svc is the biggest map (a master and one slot per backend): it is indexed from the raw batch.
  const svc = withMap(bpffsDir, MAP_NAMES.svc, readWhole);
  const backends = withMap(bpffsDir, MAP_NAMES.backend, (m) => new BackendBatch(readWhole(m)));
  // Names are optional: maps pinned by an agent older than kpr_svc_meta have none.
  const meta = existsSync(mapPinPath(bpffsDir, MAP_NAMES.svcMeta)) ? withMap(bpffsDir, MAP_NAMES.svcMeta, (m) => readAll(m, MAPS.svcMeta)) : [];
  const tables = tablesFromBatch(svc, backends, new Map(meta));
  // Counters are optional too: maps pinned by an agent older than kpr_svc_stats have none.
  if (existsSync(mapPinPath(bpffsDir, MAP_NAMES.svcStats))) {
    const counts = withMap(bpffsDir, MAP_NAMES.svcStats, readFrontendCounts);
    tables.counters = new Map(
      [...counts].map(([id, c]) => [
        id,
        {
          balanced: Number(c.balanced),
          refused: Number(c.refused),
          droppedNoEndpoint: Number(c.droppedNoEndpoint),
          droppedNoLocalEndpoint: Number(c.droppedNoLocalEndpoint),
          droppedSourceRange: Number(c.droppedSourceRange),
        },
      ]),
    );
  }
  return tables;
}

/** Every programmed frontend, joined with its backends and names. */
export function readServiceViews(bpffsDir: string): ServiceView[] {
  return joinTables(readServiceTables(bpffsDir));
}

/** `which` frontends of `t` (indexes into t.masters, in listing order) as JSON or the table. */
function render(t: ServiceTables, which: ArrayLike<number>, output: string): string | Iterable<Uint8Array> {
  // main.ts writes each chunk to stdout as it comes: once stdout holds none of it, its buffer can take the next.
  return output === 'json' ? serviceJson(t, which, () => process.stdout.writableLength === 0) : formatServiceTable(joinTables(t, which));
}

/** Whether a frontend is on `frontend` ("198.19.0.10", "198.19.0.10:80", "[2001:db8::1]:53"); a malformed one is a usage error. */
function frontendMatcher(frontend: string): (address: string, port: number) => boolean {
  const want = parseEndpoint(frontend, '--frontend', true);
  return (address, port) => parseIP(address)?.text === want.addr && (want.port === undefined || port === want.port);
}

/** The views on `frontend` (frontendMatcher). */
export function filterFrontend(views: ServiceView[], frontend: string): ServiceView[] {
  const on = frontendMatcher(frontend);
  return views.filter((v) => on(v.address, v.port));
}

/** The frontends of `t` on `frontend` (frontendMatcher), in listing order. */
function onFrontend(t: ServiceTables, frontend: string): number[] {
  const on = frontendMatcher(frontend);
  return Array.from(t.order).filter((m) => on(t.masters[m]!.key.addr, t.masters[m]!.key.port));
}

export function serviceList(bpffsDir: string, output: string, frontend?: string): string | Iterable<Uint8Array> {
  // Checked before the maps are read: a typo is a usage error whatever is pinned.
  if (frontend !== undefined) parseEndpoint(frontend, '--frontend', true);
  const t = readServiceTables(bpffsDir);
  return render(t, frontend === undefined ? t.order : onFrontend(t, frontend), output);
}

export function serviceGet(bpffsDir: string, name: string | undefined, output: string): string | Iterable<Uint8Array> {
  if (!name || !/^[^/]+\/[^/]+$/.test(name)) throw new UsageError('service get: NAMESPACE/NAME expected', 'service get');
  const t = readServiceTables(bpffsDir);
  const which = Array.from(t.order).filter((m) => t.meta.get(t.masters[m]!.val.frontendId)?.name === name);
  if (which.length === 0) throw new CliError(`service ${name} is not programmed on this node (no frontend in ${MAP_NAMES.svcMeta} names it)`);
  return render(t, which, output);
}
