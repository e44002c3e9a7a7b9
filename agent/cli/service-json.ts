/**
 * `kpr service list -o json`'s text written straight from the indexed
 * batches (service-view.ts ServiceTables), a chunk of JSON_CHUNK_FRONTENDS
 * frontends at a time: the same bytes as `JSON.stringify(views, null, 2)`
 * and a newline, where views are joinTables' (test/cli/service-json.test.ts
 * compares the two). At 100,000 Services × 10 endpoints, building the
 * 100,000 views with their 1,000,000 backend objects and address strings,
 * then stringifying them, was half of the CLI's CPU time and most of its
 * garbage; here a backend is a few bytes copied from its raw record.
 */
import { BE_FLAG, SVC_FLAG, decodeAddr } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import { BackendBatch, flagNames, frontendTypeName, protoName, scopeName, type ServiceTables } from './service-view.js';

/** Frontends per chunk of output. */
const JSON_CHUNK_FRONTENDS = 1000;

const BACKEND_ADDR = MAPS.backend.value.at.addr;
const BACKEND_PORT = MAPS.backend.value.at.port;
const BACKEND_FLAGS = MAPS.backend.value.at.flags;

/** The bytes of one chunk, grown by doubling. */
class ChunkWriter {
  buf: Buffer;
  pos = 0;

  constructor(capacity: number) {
    this.buf = Buffer.allocUnsafe(capacity);
  }

  ensure(room: number): void {
    if (this.pos + room <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + room));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  /** Text of any characters (names come from the maps: JSON.stringify'd by the caller). */
  text(s: string): void {
    this.ensure(s.length * 3);
    this.pos += this.buf.write(s, this.pos, 'utf8');
  }

  /** A few bytes made once (the backends' fixed text), room ensured by the caller: a loop, as Buffer.copy's call costs more than copying 20 bytes (5 M calls at 100,000 × 10). */
  bytes(b: Uint8Array): void {
    const buf = this.buf;
    let p = this.pos;
    for (let i = 0; i < b.length; i++) buf[p++] = b[i]!;
    this.pos = p;
  }

  /** A non-negative integer below 2^32 in decimal, room ensured by the caller. */
  uint(n: number): void {
    const buf = this.buf;
    if (n < 10) {
      buf[this.pos++] = 48 + n;
      return;
    }
    let digits = 1;
    for (let x = n; x >= 10; x = Math.floor(x / 10)) digits++;
    let p = (this.pos += digits);
    for (let x = n; digits-- > 0; x = Math.floor(x / 10)) buf[--p] = 48 + (x % 10);
  }

  /** The chunk written so far; the next one overwrites it unless fresh() is called first. */
  take(): Buffer {
    const out = this.buf.subarray(0, this.pos);
    this.pos = 0;
    return out;
  }

  /** Writes the next chunk to a new buffer (the last one is still referenced). */
  fresh(): void {
    this.buf = Buffer.allocUnsafe(this.buf.length);
  }
}

const ascii = (s: string) => new Uint8Array(Buffer.from(s, 'latin1'));
const BE_OPEN = ascii('\n      {\n        "id": ');
const BE_ADDR = ascii(',\n        "address": "');
const BE_PORT = ascii('",\n        "port": ');
const BE_LOCAL = ascii(',\n        "local": true');
const BE_CLOSE = ascii('\n      }');
const BE_UNKNOWN = ascii('",\n        "port": 0\n      }');
/** The longest a backend's text can be, with a 39-character IPv6 address and 10-digit numbers. */
const BE_MAX = BE_OPEN.length + 10 + BE_ADDR.length + 39 + BE_PORT.length + 5 + BE_LOCAL.length + BE_CLOSE.length + 1;

/** An address's text straight from its 16 bytes: IPv4-mapped ones dotted (as decodeAddr prints them), others as decodeAddr prints them. */
function writeAddr(w: ChunkWriter, v: Buffer, off: number): void {
  let mapped = v[off + 10] === 0xff && v[off + 11] === 0xff;
  for (let i = 0; mapped && i < 10; i++) if (v[off + i] !== 0) mapped = false;
  if (!mapped) {
    w.text(decodeAddr(v, off));
    return;
  }
  for (let i = 12; i < 16; i++) {
    if (i > 12) w.buf[w.pos++] = 46; // '.'
    w.uint(v[off + i]!);
  }
}

/** The "backends" member's value: `[]`, or each slot's backend as JSON.stringify(…, null, 2) prints it at that depth. */
function writeBackends(w: ChunkWriter, t: ServiceTables, base: number, count: number): void {
  if (count === 0) {
    w.text('[]');
    return;
  }
  w.text('[');
  const values = t.backends.values;
  for (let slot = 0; slot < count; slot++) {
    w.ensure(BE_MAX);
    if (slot > 0) w.buf[w.pos++] = 44; // ','
    const id = t.slotIds[base + slot]!;
    w.bytes(BE_OPEN);
    w.uint(id);
    w.bytes(BE_ADDR);
    const r = t.backends.record(id);
    if (r < 0) {
      w.buf[w.pos++] = 63; // '?'
      w.bytes(BE_UNKNOWN);
      continue;
    }
    const off = r * BackendBatch.VALUE_SIZE;
    writeAddr(w, values, off + BACKEND_ADDR);
    w.bytes(BE_PORT);
    w.uint(values.readUInt16BE(off + BACKEND_PORT));
    if (values[off + BACKEND_FLAGS]! & BE_FLAG.LOCAL) w.bytes(BE_LOCAL);
    w.bytes(BE_CLOSE);
  }
  w.text('\n    ]');
}

/** A member's text by the number it is made from (a type, protocol, scope or flags word): made once, copied as bytes. */
function memo(make: (n: number) => string): (n: number) => Uint8Array {
  const made = new Map<number, Uint8Array>();
  return (n) => {
    let b = made.get(n);
    if (b === undefined) made.set(n, (b = new Uint8Array(Buffer.from(make(n), 'utf8'))));
    return b;
  };
}

/** Nested arrays and objects as JSON.stringify(…, null, 2) prints them as a member of a frontend. */
const nested = (value: unknown) => JSON.stringify(value, null, 2).replace(/\n/g, '\n    ');
const typeText = memo((type) => `    "type": ${JSON.stringify(frontendTypeName(type))},\n`);
/** Up to the address's opening quote. */
const protoText = memo((proto) => `    "protocol": ${JSON.stringify(protoName(proto))},\n    "address": "`);
/** From the port to the id. */
const scopeText = memo((scope) => `,\n    "scope": ${JSON.stringify(scopeName(scope))},\n    "id": `);
const flagsText = memo((flags) => `,\n    "flags": ${nested(flagNames(flags))},\n`);
const FE_OPEN = ascii('  {\n');
const FE_PORT = ascii('",\n    "port": ');
const FE_AFFINITY = ascii('    "affinityTimeoutSeconds": ');
const FE_BACKENDS = ascii('    "backends": ');
const FE_CLOSE = ascii('\n  }');
/** Room for a frontend's fixed members: any flags word's names (7 and an unknown mask) fit with room to spare. */
const FE_FIXED_MAX = 1024;

/** Frontend `m` (an index into t.masters) as JSON.stringify(views, null, 2) prints an element of the array. */
function writeFrontend(w: ChunkWriter, t: ServiceTables, m: number): void {
  const { key: k, val: v, base } = t.masters[m]!;
  const meta = t.meta.get(v.frontendId);
  w.ensure(FE_FIXED_MAX);
  w.bytes(FE_OPEN);
  if (meta) {
    // Names come from the maps: any characters, escaped as JSON.stringify escapes them.
    w.text(`    "service": ${JSON.stringify(meta.name)},\n    "portName": ${JSON.stringify(meta.portName)},\n`);
    w.ensure(FE_FIXED_MAX);
    w.bytes(typeText(meta.type));
  }
  w.bytes(protoText(k.proto));
  w.pos += w.buf.write(k.addr, w.pos, 'latin1'); // decodeAddr's text: ASCII
  w.bytes(FE_PORT);
  w.uint(k.port);
  w.bytes(scopeText(k.scope));
  w.uint(v.frontendId);
  w.bytes(flagsText(v.flags));
  if (v.flags & SVC_FLAG.AFFINITY) {
    w.bytes(FE_AFFINITY);
    w.uint(v.backendId);
    w.text(',\n');
  }
  const counters = t.counters?.get(v.frontendId);
  if (counters) w.text(`    "counters": ${nested(counters)},\n`);
  w.ensure(FE_FIXED_MAX);
  w.bytes(FE_BACKENDS);
  writeBackends(w, t, base, v.count);
  w.ensure(FE_CLOSE.length);
  w.bytes(FE_CLOSE);
}

/**
 * The listing of frontends `which` (indexes into t.masters; default: all, in
 * their order), a chunk at a time. Each chunk is a new buffer unless
 * `reusable()`, asked when the consumer comes back for the next one, says
 * the last is no longer referenced (the CLI: stdout holds nothing queued,
 * process.stdout.writableLength 0). At 100,000 × 10 a new 2 MB buffer per
 * chunk made V8 count 200 MB of external memory and run a full GC of the
 * heap every few chunks; a pipe whose reader lags keeps a chunk queued.
 */
export function* serviceJson(t: ServiceTables, which: ArrayLike<number> = t.order, reusable: () => boolean = () => false): Generator<Buffer> {
  if (which.length === 0) {
    yield Buffer.from('[]\n');
    return;
  }
  const w = new ChunkWriter(1 << 20);
  w.text('[\n');
  for (let i = 0; i < which.length; i++) {
    if (i > 0) w.text(',\n');
    writeFrontend(w, t, which[i]!);
    if ((i + 1) % JSON_CHUNK_FRONTENDS === 0 && i + 1 < which.length) {
      yield w.take();
      if (!reusable()) w.fresh();
    }
  }
  w.text('\n]\n');
  yield w.take();
}
