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

  /** The chunk written so far; its bytes are overwritten by the next chunk. */
  take(): Buffer {
    const out = this.buf.subarray(0, this.pos);
    this.pos = 0;
    return out;
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

/** `"flags": […]`'s value as JSON.stringify(…, null, 2) prints it at a frontend's depth, by flags word. */
const flagsText = new Map<number, string>();
function flagsJson(flags: number): string {
  let s = flagsText.get(flags);
  if (s === undefined) flagsText.set(flags, (s = JSON.stringify(flagNames(flags), null, 2).replace(/\n/g, '\n    ')));
  return s;
}

/** Frontend `m` (an index into t.masters) as JSON.stringify(views, null, 2) prints an element of the array. */
function writeFrontend(w: ChunkWriter, t: ServiceTables, m: number): void {
  const { key: k, val: v, base } = t.masters[m]!;
  const meta = t.meta.get(v.revNatId);
  let head = '  {\n';
  if (meta) head += `    "service": ${JSON.stringify(meta.name)},\n    "portName": ${JSON.stringify(meta.portName)},\n    "type": ${JSON.stringify(frontendTypeName(meta.type))},\n`;
  head += `    "protocol": ${JSON.stringify(protoName(k.proto))},\n    "address": ${JSON.stringify(k.addr)},\n    "port": ${k.port},\n    "scope": ${JSON.stringify(scopeName(k.scope))},\n    "id": ${v.revNatId},\n    "flags": ${flagsJson(v.flags)},\n`;
  if (v.flags & SVC_FLAG.AFFINITY) head += `    "affinityTimeoutSeconds": ${v.backendId},\n`;
  const counters = t.counters?.get(v.revNatId);
  if (counters) head += `    "counters": ${JSON.stringify(counters, null, 2).replace(/\n/g, '\n    ')},\n`;
  w.text(head + '    "backends": ');
  writeBackends(w, t, base, v.count);
  w.text('\n  }');
}

/**
 * The listing of frontends `which` (indexes into t.masters; default: all, in
 * their order), a chunk at a time. A chunk is valid until the next one is
 * asked for: its buffer is reused (main.ts writes each as it comes, and
 * stdout is synchronous for files, pipes and terminals on Linux). A new 2 MB
 * buffer per chunk made V8 count 200 MB of external memory and run a full
 * GC of the heap every few chunks.
 */
export function* serviceJson(t: ServiceTables, which: ArrayLike<number> = t.order): Generator<Buffer> {
  if (which.length === 0) {
    yield Buffer.from('[]\n');
    return;
  }
  const w = new ChunkWriter(1 << 20);
  w.text('[\n');
  for (let i = 0; i < which.length; i++) {
    if (i > 0) w.text(',\n');
    writeFrontend(w, t, which[i]!);
    if ((i + 1) % JSON_CHUNK_FRONTENDS === 0 && i + 1 < which.length) yield w.take();
  }
  w.text('\n]\n');
  yield w.take();
}
