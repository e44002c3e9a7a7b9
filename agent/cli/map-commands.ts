/**
 * `kpr map list`, `kpr map dump NAME` and `kpr stats`: the pinned maps as
 * they are, read directly (no agent needed), as a table or JSON.
 */
import type { BatchEntries, BpfMap } from '../../native/index.js';
import { MAP_NAMES } from '../maps/layout.js';
import { layoutConverter } from '../maps/layout-convert.js';
import { MAP_BY_NAME, layoutsAt, type MapSpec } from '../maps/registry.js';
import { mapStats, pinnedMapNames, pinnedRingNames, type MapStats } from '../metrics/map-stats.js';
import { readStats, statMetric } from '../datapath/datapath-stats.js';
import { DECODERS, RING_ABOUT, knownMapNames, type Row } from './map-decoders.js';
import { CliError, UsageError, openPinnedMap, permissionError } from './pinned-maps.js';
import { describeLayout, type LayoutMismatch } from './map-layout.js';
import { tcAttachmentReport, tcAttachmentSection } from './tc-attachments.js';

export type Output = 'table' | 'json';

function json(value: unknown): string {
  return JSON.stringify(value, null, 2) + '\n';
}

/** Left-aligned columns, two spaces apart. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n') + '\n';
}

function noMaps(bpffsDir: string): CliError {
  return new CliError(`no pinned maps under ${bpffsDir}/maps: is the kpr agent running on this node with --bpffs ${bpffsDir}?`);
}

/** pinnedMapNames (or another lister of bpffsDir's pins) with the CLI's errors. */
function pinnedNames(bpffsDir: string, list: (dir: string) => string[] = pinnedMapNames): string[] {
  try {
    return list(bpffsDir);
  } catch (err) {
    throw permissionError(bpffsDir, (err as NodeJS.ErrnoException).code) ?? err;
  }
}

export function mapList(bpffsDir: string, output: Output, netns?: string): string {
  const mapNames = pinnedNames(bpffsDir);
  if (mapNames.length === 0) throw noMaps(bpffsDir);
  const names = [...mapNames, ...pinnedNames(bpffsDir, pinnedRingNames)].sort();
  const stats: Array<MapStats & { about?: string; layoutVersion?: number; foreign?: LayoutMismatch }> = [];
  for (const name of names) {
    const { map, version, foreign } = openPinnedMap(bpffsDir, name, { anyVersion: true, foreign: 'report' });
    try {
      const current = MAP_BY_NAME.get(name)?.version ?? version;
      const about = DECODERS[name]?.about ?? RING_ABOUT[name];
      // A foreign map's entries are not counted: its layout says nothing of what it holds.
      const s = foreign
        ? { name, type: map.typeName, keySize: map.keySize, valueSize: map.valueSize, entries: null, capacity: map.maxEntries }
        : mapStats(name, map);
      stats.push({ ...s, ...(version !== current ? { layoutVersion: version } : {}), ...(foreign ? { foreign } : about ? { about } : {}) });
    } finally {
      map.close();
    }
  }
  const tc = tcAttachmentReport(bpffsDir, netns);
  if (output === 'json') return json({ maps: stats, tcAttachments: tc.attachments, ...(tc.error ? { tcAttachmentsError: tc.error } : {}) });
  return (
    table(
      ['NAME', 'TYPE', 'KEY', 'VALUE', 'ENTRIES', 'CAPACITY', 'CONTENT'],
      stats.map((s) => [
        s.name,
        s.type,
        String(s.keySize),
        String(s.valueSize),
        s.entries === null ? '-' : String(s.entries),
        String(s.capacity),
        `${s.layoutVersion !== undefined ? `(layout v${s.layoutVersion}) ` : ''}${s.foreign ? `FOREIGN: not kpr's map (kpr's is ${describeLayout(s.foreign.expected)})` : (s.about ?? '')}`,
      ]),
    ) + tcAttachmentSection(tc, table)
  );
}

export interface DumpEntry {
  key: Row;
  value: Row;
}

/** Every entry of map `name`, decoded; a map pinned at an older layout `version` is converted to this release's first. */
export function dumpMap(map: BpfMap, name: string, version?: number): DumpEntry[] {
  const dec = DECODERS[name];
  if (!dec) throw new CliError(`no decoder for map "${name}"`);
  const spec = MAP_BY_NAME.get(name);
  const older = spec !== undefined && version !== undefined && version !== spec.version;
  const read = older ? convertEntries(map.lookupBatch(), spec, version, map) : { ...map.lookupBatch(), keySize: map.keySize, valueStride: map.valueStride };
  const { count, keys, values, keySize, valueStride } = read;
  const slot = map.perCpu ? valueStride / map.possibleCpus() : valueStride;
  const out: DumpEntry[] = [];
  for (let i = 0; i < count; i++) {
    const raw = values.subarray(i * valueStride, (i + 1) * valueStride);
    if (dec.sparse && raw.every((b) => b === 0)) continue;
    const key = dec.key(keys, i * keySize);
    out.push({ key, value: dec.value(raw, slot, key) });
  }
  return out.sort((a, b) => compareRows(a.key, b.key));
}

const round8 = (n: number) => Math.ceil(n / 8) * 8;

/** Entries read at an older layout `version` of `spec`, in this release's layout (and its key size and value stride). */
function convertEntries(read: BatchEntries, spec: MapSpec, version: number, map: BpfMap): BatchEntries & { keySize: number; valueStride: number } {
  const from = layoutsAt(spec, version);
  if (!from)
    throw new CliError(`${spec.name} is pinned at layout v${version}, which this kpr does not know (it reads v${spec.version} and the older ones it lists)`);
  const k = layoutConverter(from.key, spec.key);
  const v = layoutConverter(from.value, spec.value);
  const cpus = map.perCpu ? map.possibleCpus() : 1;
  const srcSlot = map.perCpu ? round8(map.valueSize) : map.valueSize;
  const dstSlot = map.perCpu ? round8(spec.value.size) : spec.value.size;
  const keys = Buffer.alloc(read.count * spec.key.size);
  const values = Buffer.alloc(read.count * dstSlot * cpus);
  for (let i = 0; i < read.count; i++) {
    k(read.keys, i * map.keySize, keys, i * spec.key.size);
    for (let c = 0; c < cpus; c++) v(read.values, i * map.valueStride + c * srcSlot, values, (i * cpus + c) * dstSlot);
  }
  return { count: read.count, keys, values, keySize: spec.key.size, valueStride: dstSlot * cpus };
}

/** Orders keys field by field (numbers numerically), for stable, readable dumps. */
function compareRows(a: Row, b: Row): number {
  for (const k of Object.keys(a)) {
    const x = a[k];
    const y = b[k];
    if (x === y) continue;
    if (typeof x === 'number' && typeof y === 'number') return x - y;
    return String(x) < String(y) ? -1 : 1;
  }
  return 0;
}

function cell(v: unknown): string {
  if (Array.isArray(v)) return v.length ? v.join(',') : '-';
  if (v === '' || v === undefined || v === null) return '-';
  return String(v);
}

export function mapDump(bpffsDir: string, name: string | undefined, output: Output): string {
  if (!name) throw new UsageError(`map dump: NAME expected (one of ${knownMapNames().join(', ')})`);
  if (RING_ABOUT[name]) throw new UsageError(`${name} is a ring buffer: its records are read once, as they come, by \`kpr monitor\``);
  if (!DECODERS[name]) {
    const pinned = pinnedNames(bpffsDir).filter((n) => !DECODERS[n]);
    throw new UsageError(
      `unknown map "${name}"; known maps: ${knownMapNames().join(', ')}${pinned.length ? ` (also pinned, without a decoder: ${pinned.join(', ')})` : ''}`,
    );
  }
  const { map, version } = openPinnedMap(bpffsDir, name, { anyVersion: true });
  let entries: DumpEntry[];
  try {
    entries = dumpMap(map, name, version);
  } finally {
    map.close();
  }
  if (output === 'json') return json(entries);
  if (entries.length === 0) return `(${name} is empty)\n`;
  const keyCols = Object.keys(entries[0].key);
  const valCols = [...new Set(entries.flatMap((e) => Object.keys(e.value)))];
  if (name === MAP_NAMES.stats) valCols.splice(valCols.indexOf('perCpu'), 1);
  const header = [...keyCols.map((c) => c.toUpperCase()), ...(valCols.length ? ['=>'] : []), ...valCols.map((c) => c.toUpperCase())];
  const rows = entries.map((e) => [...keyCols.map((c) => cell(e.key[c])), ...(valCols.length ? ['=>'] : []), ...valCols.map((c) => cell(e.value[c]))]);
  return table(header, rows);
}

export interface StatRow {
  stat: string;
  metric: string;
  labels: Record<string, string>;
  value: number;
}

export function statsCommand(bpffsDir: string, output: Output, netns?: string): string {
  const map = openPinnedMap(bpffsDir, MAP_NAMES.stats);
  let rows: StatRow[];
  try {
    rows = readStats(map).map((s) => {
      const m = statMetric(s.stat);
      return {
        stat: s.stat.toLowerCase(),
        metric: `kpr_datapath_${m.metric}_total`,
        labels: m.label ? { [m.label.name]: m.label.value } : {},
        value: Number(s.value),
      };
    });
  } finally {
    map.close();
  }
  const tc = tcAttachmentReport(bpffsDir, netns);
  if (output === 'json') return json({ counters: rows, tcAttachments: tc.attachments, ...(tc.error ? { tcAttachmentsError: tc.error } : {}) });
  return (
    table(
      ['COUNTER', 'VALUE', 'METRIC'],
      rows.map((r) => {
        const labels = Object.entries(r.labels).map(([k, v]) => `${k}="${v}"`);
        return [r.stat, String(r.value), `${r.metric}${labels.length ? `{${labels.join(',')}}` : ''}`];
      }),
    ) + tcAttachmentSection(tc, table)
  );
}
