/**
 * The reconciler's mirror of the kernel's backend map, by column: one row
 * per backend id (address, port, protocol, flags, the slots naming it), and
 * the canonical id of each backend tuple.
 *
 * Why columns: at 100,000 backends an object per backend (and a heap number
 * for its 49-bit tuple) was ~10 MB of long-lived heap that every scavenge of
 * a full sync copied before promoting it. Typed arrays hold the same rows in
 * ~1.5 MB the garbage collector never walks.
 *
 * Ids are handed out lowest-first, so rows are dense: ids below DENSE_LIMIT
 * index the columns (grown by doubling); a larger id (only ever read from a
 * foreign map) is a row object in a Map. An IPv4 backend keeps its address as
 * a u32; any other keeps its text (and tuple) in side maps.
 */
import type { BackendColumns } from '../maps/datapath-maps.js';
import type { Backend } from '../maps/layout.js';
import { backendTupleKey, type BackendTuple } from './desired-frontend.js';
import { TupleIndex } from './tuple-index.js';

const DENSE_LIMIT = 1 << 22;

/** kind column: no row, an IPv4 row, a row whose address is text (IPv6, or a malformed foreign entry). */
const NONE = 0;
const V4 = 1;
const TEXT = 2;

/** A row with an id beyond the dense range. */
interface FarRow extends Backend {
  tuple: BackendTuple | null;
  refs: number;
}

function ipv4Text(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 0xff}.${(n >>> 8) & 0xff}.${n & 0xff}`;
}

export class BackendTable implements BackendColumns {
  private kind = new Uint8Array(1024);
  private addr4 = new Uint32Array(1024);
  private ports = new Uint16Array(1024);
  private protos = new Uint8Array(1024);
  private flagCol = new Uint8Array(1024);
  private refCol = new Int32Array(1024);
  /** 1 when the row's tuple is known (a backend this agent writes); 0 for a foreign entry. */
  private tupled = new Uint8Array(1024);
  /** Address text and tuple of TEXT rows. */
  private readonly texts = new Map<number, string>();
  private readonly textTuples = new Map<number, BackendTuple>();
  private readonly far = new Map<number, FarRow>();
  /** Canonical id per tuple (the lowest, when the kernel holds duplicates). */
  private readonly byTuple = new TupleIndex();
  private count = 0;

  get size(): number {
    return this.count;
  }

  has(id: number): boolean {
    return this.dense(id) ? id < this.kind.length && this.kind[id] !== NONE : this.far.has(id);
  }

  /**
   * Room for `n` rows (ids below n, as the id allocator hands them out
   * lowest first) and `n` tuples in the tuple index before either next grows
   * (a large sync's estimate of what it will hold). The columns grow to `n`
   * exactly, not by doubling: a doubling series from 1,024 rows to a million
   * touches twice the memory it ends with, all of it fresh.
   */
  reserve(n: number): void {
    this.byTuple.reserve(n);
    const rows = Math.min(Math.ceil(n), DENSE_LIMIT);
    if (rows > this.kind.length) this.resize(rows);
  }

  /** The canonical id of a tuple, or -1. */
  idOf(tuple: BackendTuple): number {
    return this.byTuple.get(tuple);
  }

  /**
   * Adds row `id` (replacing any row of that id). `ipv4`: the address as a
   * u32, or -1 to keep `text`. `tuple`: null for an entry this agent would
   * not write. Returns false when another row already holds the tuple (a
   * duplicate: not canonical).
   */
  insert(id: number, ipv4: number, text: string, port: number, proto: number, flags: number, tuple: BackendTuple | null): boolean {
    if (this.has(id)) this.remove(id);
    this.count++;
    if (this.dense(id)) {
      if (id >= this.kind.length) this.grow(id);
      this.kind[id] = ipv4 >= 0 ? V4 : TEXT;
      this.addr4[id] = ipv4 >= 0 ? ipv4 : 0;
      this.ports[id] = port;
      this.protos[id] = proto;
      this.flagCol[id] = flags;
      this.refCol[id] = 0;
      this.tupled[id] = tuple === null ? 0 : 1;
      if (ipv4 < 0) {
        this.texts.set(id, text);
        if (tuple !== null) this.textTuples.set(id, tuple);
      }
    } else {
      this.far.set(id, { addr: ipv4 >= 0 ? ipv4Text(ipv4) : text, port, proto, flags, tuple, refs: 0 });
    }
    return tuple !== null && this.byTuple.add(tuple, id);
  }

  /** Drops row `id` (and its tuple, if it is the canonical row). */
  remove(id: number): void {
    if (!this.has(id)) return;
    const tuple = this.tuple(id);
    if (tuple !== null && this.byTuple.get(tuple) === id) this.byTuple.delete(tuple);
    this.count--;
    if (this.dense(id)) {
      this.kind[id] = NONE;
      this.texts.delete(id);
      this.textTuples.delete(id);
    } else this.far.delete(id);
  }

  clear(): void {
    this.kind = new Uint8Array(1024);
    this.addr4 = new Uint32Array(1024);
    this.ports = new Uint16Array(1024);
    this.protos = new Uint8Array(1024);
    this.flagCol = new Uint8Array(1024);
    this.refCol = new Int32Array(1024);
    this.tupled = new Uint8Array(1024);
    this.texts.clear();
    this.textTuples.clear();
    this.far.clear();
    this.byTuple.clear();
    this.count = 0;
  }

  /** The row's tuple; null for a foreign entry. */
  tuple(id: number): BackendTuple | null {
    if (!this.dense(id)) return this.far.get(id)?.tuple ?? null;
    if (this.tupled[id] === 0) return null;
    if (this.kind[id] === TEXT) return this.textTuples.get(id) ?? null;
    return backendTupleKey(this.addr4[id], this.ports[id], this.protos[id]);
  }

  /** Whether the row is the one its tuple names (false for duplicates and foreign entries). */
  isCanonical(id: number): boolean {
    const tuple = this.tuple(id);
    return tuple !== null && this.byTuple.get(tuple) === id;
  }

  refs(id: number): number {
    return this.dense(id) ? this.refCol[id] : (this.far.get(id)?.refs ?? 0);
  }

  addRef(id: number): void {
    if (this.dense(id)) this.refCol[id]++;
    else {
      const r = this.far.get(id);
      if (r) r.refs++;
    }
  }

  /** One slot fewer names the row; returns how many still do. */
  dropRef(id: number): number {
    if (this.dense(id)) return --this.refCol[id];
    const r = this.far.get(id);
    return r ? --r.refs : 0;
  }

  setFlags(id: number, flags: number): void {
    if (this.dense(id)) this.flagCol[id] = flags;
    else {
      const r = this.far.get(id);
      if (r) r.flags = flags;
    }
  }

  /** Every row's id, in no particular order. */
  forEachId(fn: (id: number) => void): void {
    const kind = this.kind;
    for (let id = 0; id < kind.length; id++) if (kind[id] !== NONE) fn(id);
    for (const id of this.far.keys()) fn(id);
  }

  /** One past the highest id forEachDenseId can visit (the dense range grows as ids are handed out). */
  get denseEnd(): number {
    return this.kind.length;
  }

  /** The ids of rows in [from, to) of the dense range, in order (a sliced read-back hashes them a range at a time). */
  forEachDenseId(from: number, to: number, fn: (id: number) => void): void {
    const kind = this.kind;
    for (let id = from, end = Math.min(to, kind.length); id < end; id++) if (kind[id] !== NONE) fn(id);
  }

  /** The ids of the rows beyond the dense range (foreign entries only). */
  forEachFarId(fn: (id: number) => void): void {
    for (const id of this.far.keys()) fn(id);
  }

  // ---- BackendColumns: the values written to the kernel

  ipv4(id: number): number {
    return this.dense(id) && this.kind[id] === V4 ? this.addr4[id] : -1;
  }

  addr(id: number): string {
    if (!this.dense(id)) return this.far.get(id)?.addr ?? '';
    return this.kind[id] === V4 ? ipv4Text(this.addr4[id]) : (this.texts.get(id) ?? '');
  }

  port(id: number): number {
    return this.dense(id) ? this.ports[id] : (this.far.get(id)?.port ?? 0);
  }

  proto(id: number): number {
    return this.dense(id) ? this.protos[id] : (this.far.get(id)?.proto ?? 0);
  }

  flags(id: number): number {
    return this.dense(id) ? this.flagCol[id] : (this.far.get(id)?.flags ?? 0);
  }

  /** The row as a backend-map value. */
  backend(id: number): Backend {
    return { addr: this.addr(id), port: this.port(id), proto: this.proto(id), flags: this.flags(id) };
  }

  /** Whether row `id` lives in the columns (whether or not it exists); the other accessors expect an existing row. */
  private dense(id: number): boolean {
    return id >= 0 && id < DENSE_LIMIT && id === (id | 0);
  }

  private grow(id: number): void {
    let cap = this.kind.length;
    while (cap <= id) cap *= 2;
    this.resize(cap);
  }

  private resize(cap: number): void {
    const widen = <T extends Uint8Array | Uint16Array | Uint32Array | Int32Array>(old: T, make: (n: number) => T): T => {
      const next = make(cap);
      next.set(old);
      return next;
    };
    this.kind = widen(this.kind, (n) => new Uint8Array(n));
    this.addr4 = widen(this.addr4, (n) => new Uint32Array(n));
    this.ports = widen(this.ports, (n) => new Uint16Array(n));
    this.protos = widen(this.protos, (n) => new Uint8Array(n));
    this.flagCol = widen(this.flagCol, (n) => new Uint8Array(n));
    this.refCol = widen(this.refCol, (n) => new Int32Array(n));
    this.tupled = widen(this.tupled, (n) => new Uint8Array(n));
  }
}
