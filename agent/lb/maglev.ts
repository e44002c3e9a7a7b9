/**
 * Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and Reliable
 * Software Network Load Balancer", NSDI 2016, §3.4): a frontend's lookup
 * table of M slots, each naming one of its backends, that every node
 * computes identically from the same backends, and that changes in only
 * ~1/N of its slots when one of N backends comes or goes. Pure: no kernel,
 * no map, no clock; the reconciler writes the tables it computes
 * (agent/reconcile/maglev-table.ts; docs/architecture.md, *Maglev*).
 *
 * The table. Each backend i has a permutation of the slots,
 * permutation_i[j] = (offset_i + j·skip_i) mod M, with offset_i = h1 mod M
 * and skip_i = h2 mod (M-1) + 1 (h1, h2: agent/lb/maglev-hash.ts, over the
 * backend's identity). Backends take turns in a fixed order; at its turn a
 * backend takes the next slot of its permutation that is still empty,
 * until every slot is taken. With weights (Cilium's weighted Maglev) a
 * backend of weight w takes w turns a round; weight 0 leaves it out;
 * weights are divided by their greatest common divisor first, so weights
 * 2,2,2 give the table of 1,1,1.
 *
 * Identity and order. A backend is its address and port, not its position
 * in an EndpointSlice: the identity is the 16 bytes every kpr map uses for
 * an address (IPv4 as ::ffff:a.b.c.d) then the port, big-endian (18
 * bytes), and the turn order is the identities' byte order (address, then
 * port: the planner's order for one family). So the table depends on the
 * set of backends, not on the order they were listed in; a backend listed
 * twice counts once (with its largest weight).
 *
 * Memory. An entry is the backend's index in the table's own backend list
 * (`backends`), one byte when there are at most 256 backends, two bytes
 * otherwise (M ≤ 65521 < 2^16): 16 or 32 KiB at M=16381, where Cilium
 * stores a 4-byte backend id per slot (65.5 KB per Service). M comes from
 * agent/lb/prime.ts (auto: 1021 for up to 3 backends, 4093 for 7 to 13;
 * never more than 64 KiB of entries). MaglevTableCache
 * shares one table between every frontend with the same backends, weights
 * and M (a Service's ClusterIP, NodePort, external and load-balancer
 * frontends of one port, and its other ports with the same endpoints).
 *
 * A packet picks entries[slotOf(tupleHash(5-tuple), M)] (maglev-hash.ts).
 */
import { ipv4Canonical, ipv6Groups, IPV4_INVALID, mappedIPv4, parseIPv4, formatIPv4, formatIPv6 } from '../net/ip.js';
import { MAGLEV_SEED_OFFSET, MAGLEV_SEED_SKIP, murmur3, slotOf } from './maglev-hash.js';
import { autoTableSize, checkPrimeSize, MAGLEV_DEFAULT_M, MAGLEV_DEFAULT_MIN_M, MAGLEV_MAX_M, validateTableSize } from './prime.js';
import { TableShares } from './table-shares.js';

/** A backend as the caller has it: an address of either family, a port, and an optional weight (default 1). */
export interface MaglevBackendInput {
  address: string;
  port: number;
  /** A whole number 0..MAGLEV_MAX_WEIGHT; 0 keeps the backend out of the table. Default 1. */
  weight?: number;
}

/** A backend of a table, in the table's order. */
export interface MaglevBackend {
  /** Canonical text of the address (agent/net/ip.ts). */
  address: string;
  port: number;
  /** The weight after division by the backends' greatest common divisor. */
  weight: number;
}

/** How M is chosen (agent/lb/prime.ts). */
export type MaglevSizing = { mode: 'fixed'; m: number } | { mode: 'auto'; minM: number; maxM: number };

export const MAGLEV_DEFAULT_SIZING: MaglevSizing = { mode: 'auto', minM: MAGLEV_DEFAULT_MIN_M, maxM: MAGLEV_MAX_M };
/** Cilium's model, for comparison: every table at 16381. */
export const MAGLEV_CILIUM_SIZING: MaglevSizing = { mode: 'fixed', m: MAGLEV_DEFAULT_M };

/** The largest weight: a backend takes at most this many turns a round. */
export const MAGLEV_MAX_WEIGHT = 0xffff;

export interface MaglevTable {
  /** Slots (a prime); 0 for a table with no backend of weight above 0. */
  readonly m: number;
  /** The backends with a weight above 0, in turn order: entries index into it. */
  readonly backends: readonly MaglevBackend[];
  /** Slot → index in `backends`; u8 up to 256 backends, u16 beyond. */
  readonly entries: Uint8Array | Uint16Array;
  /** The entries' size in bytes: m × 1 or m × 2. */
  readonly bytes: number;
  /** What the table is a function of: M, and each backend with its weight, in order (MaglevTableCache's key). */
  readonly key: string;
  /** Advice on M (below 100·N); never an error. */
  readonly warnings: readonly string[];
}

/** One backend, parsed: its identity bytes and canonical text. */
interface Parsed {
  id: Uint8Array;
  address: string;
  port: number;
  weight: number;
}

/** The 16-byte map form of an address (IPv4 as ::ffff:a.b.c.d) and its canonical text; throws on anything else. */
function addressBytes(address: string, into: Uint8Array): string {
  let v4 = ipv4Canonical(address);
  let text = address;
  if (v4 === IPV4_INVALID) {
    const groups = ipv6Groups(address);
    if (!groups) throw new RangeError(`a Maglev backend's address must be an IPv4 or IPv6 address, not ${JSON.stringify(address)}`);
    v4 = mappedIPv4(groups);
    if (v4 < 0) {
      for (let g = 0; g < 8; g++) {
        into[2 * g] = groups[g] >>> 8;
        into[2 * g + 1] = groups[g] & 0xff;
      }
      return formatIPv6(groups);
    }
    text = formatIPv4(v4);
  } else if (v4 < 0) {
    const p = parseIPv4(address)!;
    v4 = p.num;
    text = p.text;
  }
  into[10] = 0xff;
  into[11] = 0xff;
  into[12] = v4 >>> 24;
  into[13] = (v4 >>> 16) & 0xff;
  into[14] = (v4 >>> 8) & 0xff;
  into[15] = v4 & 0xff;
  return text;
}

function parseBackend(b: MaglevBackendInput): Parsed {
  const weight = b.weight ?? 1;
  if (!Number.isInteger(b.port) || b.port < 1 || b.port > 0xffff)
    throw new RangeError(`a Maglev backend's port must be 1 to 65535, not ${b.port} (${b.address})`);
  if (!Number.isInteger(weight) || weight < 0 || weight > MAGLEV_MAX_WEIGHT)
    throw new RangeError(`a Maglev backend's weight must be a whole number from 0 to ${MAGLEV_MAX_WEIGHT}, not ${weight} (${b.address}:${b.port})`);
  const id = new Uint8Array(18);
  const address = addressBytes(b.address, id);
  id[16] = b.port >>> 8;
  id[17] = b.port & 0xff;
  return { id, address, port: b.port, weight };
}

function compareIds(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < 18; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

const gcd = (a: number, b: number): number => {
  while (b) [a, b] = [b, a % b];
  return a;
};

/** The backends of weight above 0, each once (largest weight), in identity order, weights divided by their gcd. */
function normalise(input: readonly MaglevBackendInput[]): Parsed[] {
  const parsed = input.map(parseBackend).sort((a, b) => compareIds(a.id, b.id));
  const out: Parsed[] = [];
  for (const p of parsed) {
    const last = out[out.length - 1];
    if (last && compareIds(last.id, p.id) === 0) last.weight = Math.max(last.weight, p.weight);
    else out.push(p);
  }
  const live = out.filter((p) => p.weight > 0);
  const g = live.reduce((acc, p) => gcd(acc, p.weight), 0);
  if (g > 1) for (const p of live) p.weight /= g;
  return live;
}

/** The table size for `n` live backends under `sizing`, with its warnings; throws when the sizing is invalid for n. */
export function tableSizeFor(n: number, sizing: MaglevSizing): { m: number; warnings: string[] } {
  if (n === 0) return { m: 0, warnings: [] };
  if (sizing.mode === 'fixed') return { m: sizing.m, warnings: validateTableSize(sizing.m, n) };
  const m = autoTableSize(n, sizing.minM, sizing.maxM);
  return { m, warnings: validateTableSize(m, n) };
}

/** Throws a RangeError when `sizing` itself is invalid (whatever the backends). */
export function checkSizing(sizing: MaglevSizing): void {
  if (sizing.mode === 'fixed') checkPrimeSize(sizing.m, 'the Maglev table size M');
  else autoTableSize(1, sizing.minM, sizing.maxM);
}

const keyOf = (m: number, backends: readonly Parsed[]): string => {
  let k = `M=${m}`;
  for (const b of backends) k += b.weight === 1 ? ` ${b.address}/${b.port}` : ` ${b.address}/${b.port}*${b.weight}`;
  return k;
};

/** The table's inputs, normalised: the backends in order, M, the key. */
interface Prepared {
  backends: Parsed[];
  m: number;
  warnings: string[];
  key: string;
}

function prepare(input: readonly MaglevBackendInput[], sizing: MaglevSizing): Prepared {
  const backends = normalise(input);
  const { m, warnings } = tableSizeFor(backends.length, sizing);
  return { backends, m, warnings, key: keyOf(m, backends) };
}

const EMPTY = 0xffff;

/** Fills the M slots (the paper's Populate, with weighted turns). */
function populate(backends: readonly Parsed[], m: number): Uint8Array | Uint16Array {
  const n = backends.length;
  const slots = new Uint16Array(m).fill(EMPTY);
  if (n === 0) return new Uint8Array(0);
  const next = new Int32Array(n);
  const skip = new Int32Array(n);
  const turns = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const id = backends[i].id;
    next[i] = murmur3(id, MAGLEV_SEED_OFFSET) % m;
    skip[i] = (murmur3(id, MAGLEV_SEED_SKIP) % (m - 1)) + 1;
    turns[i] = backends[i].weight;
  }
  let filled = 0;
  for (;;) {
    for (let i = 0; i < n; i++) {
      const s = skip[i];
      let p = next[i];
      for (let t = turns[i]; t > 0; t--) {
        while (slots[p] !== EMPTY) {
          p += s;
          if (p >= m) p -= m;
        }
        slots[p] = i;
        p += s;
        if (p >= m) p -= m;
        if (++filled === m) return n <= 256 ? new Uint8Array(slots) : slots;
      }
      next[i] = p;
    }
  }
}

function build(p: Prepared): MaglevTable {
  const entries = populate(p.backends, p.m);
  return {
    m: p.m,
    backends: p.backends.map(({ address, port, weight }) => ({ address, port, weight })),
    entries,
    bytes: entries.byteLength,
    key: p.key,
    warnings: p.warnings,
  };
}

/**
 * The Maglev table of `backends` (any order; invalid addresses, ports,
 * weights or sizing throw a RangeError naming the value).
 */
export function maglevTable(backends: readonly MaglevBackendInput[], sizing: MaglevSizing = MAGLEV_DEFAULT_SIZING): MaglevTable {
  return build(prepare(backends, sizing));
}

/**
 * What the table of `backends` is a function of (MaglevTable.key), without
 * computing it: M and the normalised backends (a RangeError as maglevTable).
 */
export function maglevTableKey(backends: readonly MaglevBackendInput[], sizing: MaglevSizing = MAGLEV_DEFAULT_SIZING): string {
  return prepare(backends, sizing).key;
}

/** The index in `table.backends` a flow hash (maglev-hash.ts tupleHash) picks; -1 for an empty table. */
export function pickBackend(table: MaglevTable, flowHash: number): number {
  return table.m === 0 ? -1 : table.entries[slotOf(flowHash, table.m)];
}

/** A frontend's hold on a shared table. */
export interface MaglevTableRef {
  /** The table's id: a small integer, stable while any frontend holds the table, reused after its last release. */
  readonly id: number;
  readonly table: MaglevTable;
}

/**
 * Tables shared between frontends: one per distinct key (M, backends,
 * weights), reference-counted (table-shares.ts), with a small integer id
 * each (a datapath would index its table store by it). acquire() computes a
 * table only when no frontend holds one with its key; release() frees it
 * with its last holder. Not thread-safe, no I/O.
 */
export class MaglevTableCache {
  private readonly shares = new TableShares<MaglevTableRef>();
  private readonly freeIds: number[] = [];
  private nextId = 0;
  private totalBytes = 0;
  /** Tables computed (misses) and acquisitions served by an existing table (hits). */
  readonly stats = { computed: 0, shared: 0 };

  constructor(readonly sizing: MaglevSizing = MAGLEV_DEFAULT_SIZING) {
    checkSizing(sizing);
  }

  /** The shared table of `backends`, computed if no frontend holds it; call release() with the ref when the frontend lets go. */
  acquire(backends: readonly MaglevBackendInput[]): MaglevTableRef {
    const p = prepare(backends, this.sizing);
    const held = this.shares.idOf(p.key);
    if (held !== undefined) {
      const ref = this.shares.value(held)!;
      this.shares.hold(held, ref);
      this.stats.shared++;
      return ref;
    }
    const table = build(p);
    const id = this.freeIds.length ? this.freeIds.pop()! : this.nextId++;
    const ref = { id, table };
    this.shares.hold(id, ref, p.key);
    this.totalBytes += table.bytes;
    this.stats.computed++;
    return ref;
  }

  /** Lets go of one hold on `ref`'s table; the table and its id are freed with the last. Throws for a ref not held. */
  release(ref: MaglevTableRef): void {
    if (this.shares.value(ref.id) !== ref) throw new Error(`Maglev table ${ref.id} (${ref.table.key.slice(0, 60)}) is not held`);
    if (this.shares.release(ref.id) > 0) return;
    this.totalBytes -= ref.table.bytes;
    this.freeIds.push(ref.id);
  }

  /** Distinct tables held. */
  get tables(): number {
    return this.shares.size;
  }

  /** The entries' bytes of every distinct table held. */
  get bytes(): number {
    return this.totalBytes;
  }

  /** How many frontends hold the table of `ref`. */
  holders(ref: MaglevTableRef): number {
    return this.shares.value(ref.id) === ref ? this.shares.holders(ref.id) : 0;
  }
}
