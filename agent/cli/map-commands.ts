/**
 * `kpr map list`, `kpr map dump NAME` and `kpr stats`: the pinned maps as
 * they are, read directly (no agent needed), as a table or JSON.
 */
import { BpfMap } from '../../native/index.js';
import { MAP_NAMES } from '../maps/layout.js';
import { mapStats, pinnedMapNames, pinnedRingNames, type MapStats } from '../metrics/map-stats.js';
import { readStats, statMetric } from '../metrics/datapath-stats.js';
import { DECODERS, RING_ABOUT, knownMapNames, type Row } from './map-decoders.js';
import { CliError, openPinnedMap, permissionError } from './pinned-maps.js';
import { tcAttachmentReport, tcAttachmentSection } from './tc-attachments.js';

export type Output = 'table' | 'json';

function json(value: unknown): string {
  return JSON.stringify(value, null, 2) + '\n';
}

/** Left-aligned columns, two spaces apart. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]))).join('  ').trimEnd();
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
  const stats: Array<MapStats & { about?: string }> = [];
  for (const name of names) {
    const map = openPinnedMap(bpffsDir, name);
    try {
      const about = DECODERS[name]?.about ?? RING_ABOUT[name];
      stats.push({ ...mapStats(name, map), ...(about ? { about } : {}) });
    } finally {
      map.close();
    }
  }
  const tc = tcAttachmentReport(bpffsDir, netns);
  if (output === 'json') return json({ maps: stats, tcAttachments: tc.attachments, ...(tc.error ? { tcAttachmentsError: tc.error } : {}) });
  return (
    table(
      ['NAME', 'TYPE', 'KEY', 'VALUE', 'ENTRIES', 'CAPACITY', 'CONTENT'],
      stats.map((s) => [s.name, s.type, String(s.keySize), String(s.valueSize), s.entries === null ? '-' : String(s.entries), String(s.capacity), s.about ?? '']),
    ) + tcAttachmentSection(tc, table)
  );
}

export interface DumpEntry {
  key: Row;
  value: Row;
}

/** Every entry of map `name`, decoded. */
export function dumpMap(map: BpfMap, name: string): DumpEntry[] {
  const dec = DECODERS[name];
  if (!dec) throw new CliError(`no decoder for map "${name}"`);
  const { count, keys, values } = map.lookupBatch();
  const slot = map.perCpu ? map.valueStride / map.possibleCpus() : map.valueSize;
  const out: DumpEntry[] = [];
  for (let i = 0; i < count; i++) {
    const raw = values.subarray(i * map.valueStride, (i + 1) * map.valueStride);
    if (dec.sparse && raw.every((b) => b === 0)) continue;
    const key = dec.key(keys, i * map.keySize);
    out.push({ key, value: dec.value(raw, slot, key) });
  }
  return out.sort((a, b) => compareRows(a.key, b.key));
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
  if (!name) throw new CliError(`usage: kpr map dump NAME (one of ${knownMapNames().join(', ')})`);
  if (RING_ABOUT[name]) throw new CliError(`${name} is a ring buffer: its records are read once, as they come, by \`kpr monitor\``);
  if (!DECODERS[name]) {
    const pinned = pinnedNames(bpffsDir).filter((n) => !DECODERS[n]);
    throw new CliError(`unknown map "${name}"; known maps: ${knownMapNames().join(', ')}${pinned.length ? ` (also pinned, without a decoder: ${pinned.join(', ')})` : ''}`);
  }
  const map = openPinnedMap(bpffsDir, name);
  let entries: DumpEntry[];
  try {
    entries = dumpMap(map, name);
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
      return { stat: s.stat.toLowerCase(), metric: `kpr_datapath_${m.metric}_total`, labels: m.label ? { [m.label.name]: m.label.value } : {}, value: Number(s.value) };
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
