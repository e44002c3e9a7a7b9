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
import { CliError, openPinnedMap } from './pinned-maps.js';
import { readFrontendCounts } from '../metrics/service-stats.js';
import { BackendBatch, formatServiceTable, joinTables, tablesFromBatch, type ServiceView } from './service-view.js';
import { parseIP } from '../net/ip.js';
import { parseEndpoint } from './trace.js';

export const SERVICE_LIST_USAGE = `  service list [--frontend VIP[:PORT]]
                          every frontend with its names and backends (ipvsadm -Ln style); --frontend: only the
                          frontends on that address (and port; IPv6 as [addr]:port)`;
export const SERVICE_GET_USAGE = `  service get NS/NAME     the frontends of one Service`;

/** Every entry of a registry map, decoded with its codecs. */
function readAll<K, V>(map: BpfMap, spec: MapSpec<K, V>): Array<[K, V]> {
  const c = mapCodecs(spec);
  const { count, keys, values } = map.lookupBatch();
  const out: Array<[K, V]> = new Array(count);
  for (let i = 0; i < count; i++) out[i] = [c.key.decode(keys, i * c.key.size), c.value.decode(values, i * c.value.size)];
  return out;
}

function withMap<T>(bpffsDir: string, name: string, f: (m: BpfMap) => T): T {
  const m = openPinnedMap(bpffsDir, name);
  try {
    return f(m);
  } finally {
    m.close();
  }
}

/** Every programmed frontend, joined with its backends and names. */
export function readServiceViews(bpffsDir: string): ServiceView[] {
  // kpr_svc is the biggest map (a master and one slot per backend): it is indexed from the raw batch.
  const svc = withMap(bpffsDir, MAP_NAMES.svc, (m) => m.lookupBatch());
  const backends = withMap(bpffsDir, MAP_NAMES.backend, (m) => new BackendBatch(m.lookupBatch()));
  // Names are optional: maps pinned by an agent older than kpr_svc_meta have none.
  const meta = existsSync(mapPinPath(bpffsDir, MAP_NAMES.svcMeta))
    ? withMap(bpffsDir, MAP_NAMES.svcMeta, (m) => readAll(m, MAPS.svcMeta))
    : [];
  const tables = tablesFromBatch(svc, backends, new Map(meta));
  // Counters are optional too: maps pinned by an agent older than kpr_svc_stats have none.
  if (existsSync(mapPinPath(bpffsDir, MAP_NAMES.svcStats))) {
    const counts = withMap(bpffsDir, MAP_NAMES.svcStats, readFrontendCounts);
    tables.counters = new Map([...counts].map(([id, c]) => [id, { balanced: Number(c.balanced), refused: Number(c.refused), droppedNoEndpoint: Number(c.droppedNoEndpoint), droppedNoLocalEndpoint: Number(c.droppedNoLocalEndpoint), droppedSourceRange: Number(c.droppedSourceRange) }]));
  }
  return joinTables(tables);
}

/** Views per chunk of `-o json`. */
const JSON_CHUNK_VIEWS = 1000;

/**
 * `JSON.stringify(views, null, 2)` and a newline, in chunks of
 * JSON_CHUNK_VIEWS views: at 100,000 Services × 10 the whole text is 120 MB,
 * and making it one string (then one buffer to write) cost 0.6 s of CPU and
 * 200 MB of RSS more than writing it a chunk at a time.
 */
export function* jsonChunks(views: readonly unknown[]): Generator<string> {
  if (views.length === 0) {
    yield '[]\n';
    return;
  }
  for (let i = 0; i < views.length; i += JSON_CHUNK_VIEWS) {
    // "[\n  {…},\n  {…}\n]" without its brackets, joined as the whole array's text joins its elements.
    const inner = JSON.stringify(views.slice(i, i + JSON_CHUNK_VIEWS), null, 2).slice(2, -2);
    yield (i === 0 ? '[\n' : ',\n') + inner + (i + JSON_CHUNK_VIEWS >= views.length ? '\n]\n' : '');
  }
}

function render(views: ServiceView[], output: string): string | Iterable<string> {
  return output === 'json' ? jsonChunks(views) : formatServiceTable(views);
}

/** The views on `frontend` ("198.19.0.10", "198.19.0.10:80", "[2001:db8::1]:53"); a malformed one is a usage error. */
export function filterFrontend(views: ServiceView[], frontend: string): ServiceView[] {
  const want = parseEndpoint(frontend, '--frontend', true);
  return views.filter((v) => parseIP(v.address)?.text === want.addr && (want.port === undefined || v.port === want.port));
}

export function serviceList(bpffsDir: string, output: string, frontend?: string): string | Iterable<string> {
  // Checked before the maps are read: a typo is a usage error whatever is pinned.
  if (frontend !== undefined) parseEndpoint(frontend, '--frontend', true);
  const views = readServiceViews(bpffsDir);
  return render(frontend === undefined ? views : filterFrontend(views, frontend), output);
}

export function serviceGet(bpffsDir: string, name: string | undefined, output: string): string | Iterable<string> {
  if (!name || !/^[^/]+\/[^/]+$/.test(name)) throw new CliError('usage: kpr service get NAMESPACE/NAME');
  const views = readServiceViews(bpffsDir).filter((v) => v.service === name);
  if (views.length === 0) throw new CliError(`service ${name} is not programmed on this node (no frontend in ${MAP_NAMES.svcMeta} names it)`);
  return render(views, output);
}
