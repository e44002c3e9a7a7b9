/**
 * Converts records between two layouts of one struct (an older release's
 * and this one's, registry.ts `older`), member by member, by name: a member
 * of both is copied (an integer widened or narrowed, little-endian, a C
 * string cut to its new size), a member only the target has is zero, and
 * padding is zero. No object is decoded, so a migration converts a large
 * map at the speed of a byte copy. Pure.
 */
import type { PlacedField, StructLayout } from './struct-codec.js';

/** Converts the record at `so` of `src` into the record at `dof` of `dst` (whose bytes it writes in full). */
export type RecordConverter = (src: Buffer, so: number, dst: Buffer, dof: number) => void;

const INT_KINDS = new Set(['u8', 'u16', 'u32']);

/** Two layouts with the same bytes: every member at the same place, of the same kind. */
export function sameLayout(a: StructLayout, b: StructLayout): boolean {
  if (a === b) return true;
  if (a.size !== b.size || a.placed.length !== b.placed.length) return false;
  return a.placed.every((f, i) => {
    const g = b.placed[i]!;
    return f.offset === g.offset && f.size === g.size && f.kind === g.kind && f.prop === g.prop;
  });
}

function readInt(f: PlacedField, b: Buffer, o: number): number {
  switch (f.size) {
    case 1:
      return b[o + f.offset]!;
    case 2:
      return b.readUInt16LE(o + f.offset);
    default:
      return b.readUInt32LE(o + f.offset);
  }
}

/** One member's copy from `from` into `to`, or undefined when the kinds cannot be converted. */
function memberCopy(from: PlacedField, to: PlacedField, what: string): RecordConverter | undefined {
  if (from.kind === to.kind && from.size === to.size) {
    const n = from.size;
    return (s, so, d, dof) => void s.copy(d, dof + to.offset, so + from.offset, so + from.offset + n);
  }
  if (INT_KINDS.has(from.kind) && INT_KINDS.has(to.kind)) {
    const max = 2 ** (8 * to.size) - 1;
    return (s, so, d, dof) => {
      const v = readInt(from, s, so);
      if (v > max) throw new RangeError(`${what}: ${v} does not fit ${to.size * 8} bits`);
      if (to.size === 1) d[dof + to.offset] = v;
      else if (to.size === 2) d.writeUInt16LE(v, dof + to.offset);
      else d.writeUInt32LE(v, dof + to.offset);
    };
  }
  if (from.kind === 'cstr' && to.kind === 'cstr') {
    const n = Math.min(from.size, to.size - 1);
    return (s, so, d, dof) => {
      s.copy(d, dof + to.offset, so + from.offset, so + from.offset + n);
      d[dof + to.offset + n] = 0;
    };
  }
  if ((from.kind === 'addr' || from.kind === 'addrOrEmpty') && (to.kind === 'addr' || to.kind === 'addrOrEmpty')) {
    return (s, so, d, dof) => void s.copy(d, dof + to.offset, so + from.offset, so + from.offset + 16);
  }
  return undefined;
}

/**
 * The converter from records of layout `from` to records of layout `to`.
 * Throws at once when a member both have cannot be converted (an address
 * into a number, say); the converter throws RangeError for a value that
 * does not fit its narrower member (an older layout read back from a newer one).
 */
export function layoutConverter(from: StructLayout, to: StructLayout): RecordConverter {
  const size = to.size;
  if (sameLayout(from, to)) return (s, so, d, dof) => void s.copy(d, dof, so, so + size);
  const byProp = new Map(from.placed.filter((f) => f.prop !== undefined).map((f) => [f.prop!, f]));
  const steps: RecordConverter[] = [];
  for (const f of to.placed) {
    if (f.prop === undefined) continue; // padding: zeroed below
    const g = byProp.get(f.prop);
    if (!g) continue; // a member the older layout lacks: zero
    const step = memberCopy(g, f, `${to.cName}.${f.c || 'value'}`);
    if (!step) throw new Error(`${from.cName}.${g.c} (${g.kind}) cannot become ${to.cName}.${f.c} (${f.kind})`);
    steps.push(step);
  }
  return (s, so, d, dof) => {
    d.fill(0, dof, dof + size);
    for (const step of steps) step(s, so, d, dof);
  };
}
