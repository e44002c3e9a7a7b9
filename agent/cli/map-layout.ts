/**
 * Whether a map pinned under one of kpr's names is kpr's: its type, key size
 * and value size against the layout this CLI knows for that name (and the
 * pinned layout version). Anything else pinned there (another program's
 * map, a hand-made one) is foreign: its bytes would decode as garbage, or
 * fail deep in a decoder with a raw Node error, so the CLI names it instead.
 * max_entries is not compared: kpr sizes several maps at run time.
 */
import type { BpfMap } from '../../native/index.js';
import { MAP_BY_NAME, RINGS, layoutsAt } from '../maps/registry.js';
import { CliError } from './errors.js';

export interface MapLayout {
  type: string;
  keySize: number;
  valueSize: number;
}

export interface LayoutMismatch {
  expected: MapLayout;
  found: MapLayout;
}

const RING_BY_NAME: ReadonlyMap<string, MapLayout> = new Map(Object.values(RINGS).map((r) => [r.name, { type: 'ringbuf', keySize: 0, valueSize: 0 }]));

/** kpr's layout of map `name` at layout `version` (default: this release's); undefined for a name or version this CLI does not know. */
export function expectedLayout(name: string, version?: number): MapLayout | undefined {
  const ring = RING_BY_NAME.get(name);
  if (ring) return ring;
  const spec = MAP_BY_NAME.get(name);
  if (!spec) return undefined;
  const at = layoutsAt(spec, version ?? spec.version);
  return at && { type: spec.type, keySize: at.key.size, valueSize: at.value.size };
}

/** How the pinned map differs from kpr's `name` (at `version`); undefined when it matches, or when kpr has no layout to compare. */
export function layoutMismatch(name: string, map: BpfMap, version?: number): LayoutMismatch | undefined {
  const expected = expectedLayout(name, version);
  if (!expected) return undefined;
  const found = { type: map.typeName, keySize: map.keySize, valueSize: map.valueSize };
  const same = found.type === expected.type && found.keySize === expected.keySize && found.valueSize === expected.valueSize;
  return same ? undefined : { expected, found };
}

/** "lru_hash, key 40 B, value 48 B". */
export function describeLayout(l: MapLayout): string {
  return `${l.type}, key ${l.keySize} B, value ${l.valueSize} B`;
}

/** The error for a command that reads a foreign map (exit 1). */
export function foreignMapError(name: string, pin: string, m: LayoutMismatch): CliError {
  return new CliError(
    `${name} (${pin}) is not kpr's map: layout mismatch: kpr's ${name} is ${describeLayout(m.expected)}; the map pinned there is ${describeLayout(m.found)}. ` +
      `Something else pinned a map under kpr's name (\`kpr map list\` flags it); a running agent puts its own back at its next pin check`,
  );
}
