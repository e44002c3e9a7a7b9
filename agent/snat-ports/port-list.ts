/**
 * net.ipv4.ip_local_reserved_ports as a list of port ranges: parse, format
 * (the kernel's own canonical form: ascending, merged, "a" or "a-b" joined
 * by commas) and the set operations kpr needs to add its SNAT range to what
 * is reserved and take it away again without touching anyone else's ports.
 * Pure: agent/snat-ports/proc-sys.ts reads and writes the file.
 *
 * The kernel takes the whole list at each write (it replaces the bitmap), so
 * adding a range is read, union, write.
 */

/** Inclusive port range. */
export interface PortRange {
  lo: number;
  hi: number;
}

export class PortListError extends Error {}

const isPort = (n: number) => Number.isInteger(n) && n >= 0 && n <= 65535;

/** "5000,61000-65535" → ranges (ascending, merged). Empty text is the empty list. */
export function parsePortList(text: string): PortRange[] {
  const out: PortRange[] = [];
  for (const part of text
    .trim()
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    const lo = m ? Number(m[1]) : NaN;
    const hi = m?.[2] !== undefined ? Number(m[2]) : lo;
    if (!m || !isPort(lo) || !isPort(hi) || hi < lo) throw new PortListError(`not a port or port range: "${part}"`);
    out.push({ lo, hi });
  }
  return normalise(out);
}

/** The kernel's form of a list: "5000,61000-65535", "" when empty. */
export function formatPortList(ranges: readonly PortRange[]): string {
  return normalise(ranges)
    .map((r) => (r.lo === r.hi ? String(r.lo) : `${r.lo}-${r.hi}`))
    .join(',');
}

/** Sorted, with overlapping and adjacent ranges merged. */
export function normalise(ranges: readonly PortRange[]): PortRange[] {
  const sorted = [...ranges].sort((a, b) => a.lo - b.lo);
  const out: PortRange[] = [];
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last && r.lo <= last.hi + 1) last.hi = Math.max(last.hi, r.hi);
    else out.push({ lo: r.lo, hi: r.hi });
  }
  return out;
}

/** The list with `range` added. */
export function withRange(list: readonly PortRange[], range: PortRange): PortRange[] {
  return normalise([...list, range]);
}

/** The list with every port of `range` taken out (ranges around it are cut, not dropped). */
export function withoutRange(list: readonly PortRange[], range: PortRange): PortRange[] {
  const out: PortRange[] = [];
  for (const r of normalise(list)) {
    if (r.hi < range.lo || r.lo > range.hi) {
      out.push({ ...r });
      continue;
    }
    if (r.lo < range.lo) out.push({ lo: r.lo, hi: range.lo - 1 });
    if (r.hi > range.hi) out.push({ lo: range.hi + 1, hi: r.hi });
  }
  return out;
}

/** Whether every port of `range` is in the list. */
export function covers(list: readonly PortRange[], range: PortRange): boolean {
  return normalise(list).some((r) => r.lo <= range.lo && r.hi >= range.hi);
}

/** The ports two ranges share, or undefined. */
export function overlap(a: PortRange, b: PortRange): PortRange | undefined {
  const lo = Math.max(a.lo, b.lo);
  const hi = Math.min(a.hi, b.hi);
  return lo <= hi ? { lo, hi } : undefined;
}

/** net.ipv4.ip_local_port_range's text ("32768\t60999"): the node's ephemeral ports. */
export function parseLocalPortRange(text: string): PortRange {
  const m = /^\s*(\d+)\s+(\d+)\s*$/.exec(text);
  const lo = m ? Number(m[1]) : NaN;
  const hi = m ? Number(m[2]) : NaN;
  if (!m || !isPort(lo) || !isPort(hi) || hi < lo) throw new PortListError(`not a port range: "${text.trim()}"`);
  return { lo, hi };
}

/** What the agent's start does to the reserved ports, from what it read: pure. */
export interface ReservePlan {
  /** write: the list to write; keep: already reserved. */
  action: 'write' | 'keep';
  /** The text to write (action write). */
  text?: string;
  /** Whether kpr owns the reservation afterwards, so `kpr cleanup` releases it. */
  owned: boolean;
}

/**
 * kpr's range added to the reserved ports, unless already there. Already
 * there: kpr owns it only if it owned it before (an earlier agent added it:
 * the owned flag from kpr_config); otherwise someone else reserved it, and
 * `kpr cleanup` must leave it.
 */
export function planReserve(reserved: readonly PortRange[], range: PortRange, ownedBefore: boolean): ReservePlan {
  if (covers(reserved, range)) return { action: 'keep', owned: ownedBefore };
  return { action: 'write', text: formatPortList(withRange(reserved, range)), owned: true };
}

/** `kpr cleanup`: kpr's range taken out when kpr owns it; undefined when there is nothing to write. */
export function planRelease(reserved: readonly PortRange[], range: PortRange, owned: boolean): string | undefined {
  if (!owned || !reserved.some((r) => overlap(r, range))) return undefined;
  return formatPortList(withoutRange(reserved, range));
}
