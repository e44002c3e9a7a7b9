/**
 * C structs described once, as lists of typed members, and what is derived
 * from each description: the members' offsets, the struct's size, and the
 * codec between the struct's bytes and a TypeScript object. The structs kpr's
 * maps hold are described in registry.ts; the BTF test compares every
 * description with the compiled object.
 *
 * Members follow each other with no implicit padding (kpr's structs spell
 * their padding out as `pad` members), so an offset is the sum of the sizes
 * before it.
 */

/** How a member's bytes read: little-endian (host order on x86_64/arm64) unless `be`. */
export type FieldKind =
  | 'u8'
  | 'u16'
  /** __be16 (ports). */
  | 'be16'
  | 'u32'
  /** bigint. */
  | 'u64'
  /** 16 bytes, IPv4 mapped (the address codec's). */
  | 'addr'
  /** An address, or "" for 16 zero bytes. */
  | 'addrOrEmpty'
  /** A NUL-padded C string of `size` bytes; longer text is cut (never unterminated). */
  | 'cstr'
  /** `size` zero bytes, not decoded. */
  | 'pad';

const KIND_SIZE: Record<Exclude<FieldKind, 'cstr' | 'pad'>, number> = { u8: 1, u16: 2, be16: 2, u32: 4, u64: 8, addr: 16, addrOrEmpty: 16 };

export interface FieldSpec {
  /** Member name in the C struct. */
  readonly c: string;
  readonly kind: FieldKind;
  /** Bytes, for cstr and pad (the other kinds have theirs). */
  readonly size?: number;
  /** Property of the TypeScript object; default: `c` in camelCase (rev_nat_id → revNatId). */
  readonly prop?: string;
}

export interface FieldLayout {
  /** Member name in the C struct. */
  c: string;
  offset: number;
  size: number;
}

/** A member with its place: what the codecs and the fast packers use. */
export interface PlacedField extends FieldLayout {
  kind: FieldKind;
  /** Absent for padding. */
  prop?: string;
}

/**
 * A C struct (or a bare scalar: `__u32`, `__u8`, `__u64`). `T` is what its
 * codec gives in TypeScript; `C` the member names `at` is keyed by.
 */
export interface StructLayout<T = unknown, C extends string = string> {
  /** The C type's name as it appears in BTF (a struct's tag, or a scalar's typedef). */
  cName: string;
  size: number;
  /** C members (empty for a scalar). */
  fields: FieldLayout[];
  /** Members with their kinds (a scalar: one, named ""). */
  placed: PlacedField[];
  /** Offset of each member by C name, for the fast packers. */
  at: Readonly<Record<C, number>>;
  /** Size of each member by C name. */
  sizes: Readonly<Record<C, number>>;
  /** The codec reads and writes one member's value, not an object (single-member structs kpr treats as their value, and scalars). */
  bare: boolean;
  scalar: boolean;
  /** Phantom: the codec's TypeScript type. */
  readonly _type?: T;
}

const camel = (c: string) => c.replace(/_([a-z0-9])/g, (_, x: string) => x.toUpperCase());

/**
 * A struct layout from its members (curried so that `T` is given and the
 * member names are inferred): `structLayout<SvcKey>()('kpr_svc_key', [...])`.
 * `bare`: the codec's value is the single member's, not an object.
 */
export function structLayout<T>() {
  return <const F extends readonly FieldSpec[]>(cName: string, specs: F, opts: { bare?: boolean } = {}): StructLayout<T, F[number]['c']> => {
    let offset = 0;
    const placed: PlacedField[] = specs.map((s) => {
      const size = s.kind === 'cstr' || s.kind === 'pad' ? s.size! : KIND_SIZE[s.kind];
      const f: PlacedField = { c: s.c, offset, size, kind: s.kind };
      if (s.kind !== 'pad') f.prop = s.prop ?? camel(s.c);
      offset += size;
      return f;
    });
    const at = Object.fromEntries(placed.map((f) => [f.c, f.offset])) as Record<F[number]['c'], number>;
    const sizes = Object.fromEntries(placed.map((f) => [f.c, f.size])) as Record<F[number]['c'], number>;
    return { cName, size: offset, fields: placed.map(({ c, offset: o, size }) => ({ c, offset: o, size })), placed, at, sizes, bare: opts.bare ?? false, scalar: false };
  };
}

/** A bare scalar (the key of an array or of an id-keyed map, a presence byte, a counter). */
export function scalarLayout<T extends number | bigint>(cName: '__u8' | '__u32' | '__u64', kind: 'u8' | 'u32' | 'u64'): StructLayout<T, never> {
  const size = KIND_SIZE[kind];
  return { cName, size, fields: [], placed: [{ c: '', offset: 0, size, kind, prop: '' }], at: {} as Record<never, number>, sizes: {} as Record<never, number>, bare: true, scalar: true };
}

/** The 16-byte address codec (maps/layout.ts's): structs take it as a parameter, so this module imports none. */
export interface AddrCodec {
  encode(addr: string, buf: Buffer, off: number): void;
  decode(buf: Buffer, off: number): string;
}

export interface Codec<T> {
  size: number;
  /** Writes `v` at `off` of `buf` (a new zeroed buffer by default) and returns the buffer; throws RangeError on a value the member cannot hold (u8 members keep their low byte, as a C assignment does). */
  encode(v: T, buf?: Buffer, off?: number): Buffer;
  decode(buf: Buffer, off?: number): T;
}

type Write = (v: unknown, buf: Buffer, off: number) => void;
type Read = (buf: Buffer, off: number) => unknown;

/** NUL-padded C string; text longer than the field is cut (never unterminated). */
function writeCString(text: string, buf: Buffer, off: number, size: number): void {
  buf.fill(0, off, off + size);
  buf.write(text, off, size - 1, 'utf8');
}

function readCString(buf: Buffer, off: number, size: number): string {
  const end = buf.indexOf(0, off);
  return buf.toString('utf8', off, end < 0 || end > off + size ? off + size : end);
}

function isZero(buf: Buffer, off: number, size: number): boolean {
  for (let i = 0; i < size; i++) if (buf[off + i] !== 0) return false;
  return true;
}

function writer(f: PlacedField, addr: AddrCodec): Write {
  const o = f.offset;
  const size = f.size;
  switch (f.kind) {
    case 'u8':
      return (v, b, off) => void (b[off + o] = v as number);
    case 'u16':
      return (v, b, off) => void b.writeUInt16LE(v as number, off + o);
    case 'be16':
      return (v, b, off) => void b.writeUInt16BE(v as number, off + o);
    case 'u32':
      return (v, b, off) => void b.writeUInt32LE(v as number, off + o);
    case 'u64':
      return (v, b, off) => void b.writeBigUInt64LE(v as bigint, off + o);
    case 'addr':
      return (v, b, off) => addr.encode(v as string, b, off + o);
    case 'addrOrEmpty':
      return (v, b, off) => (v ? addr.encode(v as string, b, off + o) : void b.fill(0, off + o, off + o + 16));
    case 'cstr':
      return (v, b, off) => writeCString(v as string, b, off + o, size);
    case 'pad':
      return (_v, b, off) => void b.fill(0, off + o, off + o + size);
  }
}

function reader(f: PlacedField, addr: AddrCodec): Read {
  const o = f.offset;
  const size = f.size;
  switch (f.kind) {
    case 'u8':
      return (b, off) => b[off + o];
    case 'u16':
      return (b, off) => b.readUInt16LE(off + o);
    case 'be16':
      return (b, off) => b.readUInt16BE(off + o);
    case 'u32':
      return (b, off) => b.readUInt32LE(off + o);
    case 'u64':
      return (b, off) => b.readBigUInt64LE(off + o);
    case 'addr':
      return (b, off) => addr.decode(b, off + o);
    case 'addrOrEmpty':
      return (b, off) => (isZero(b, off + o, 16) ? '' : addr.decode(b, off + o));
    case 'cstr':
      return (b, off) => readCString(b, off + o, size);
    case 'pad':
      throw new Error('padding is not read');
  }
}

/** A reader of one member (by C name) at a record's offset, e.g. the slot of a kpr_svc key in a raw batch. */
export function fieldReader<C extends string>(layout: StructLayout<unknown, C>, c: C, addr?: AddrCodec): (buf: Buffer, off: number) => unknown {
  const f = layout.placed.find((p) => p.c === c);
  if (!f || f.kind === 'pad') throw new Error(`${layout.cName} has no member ${c}`);
  if ((f.kind === 'addr' || f.kind === 'addrOrEmpty') && !addr) throw new Error(`reading ${layout.cName}.${c} needs the address codec`);
  return reader(f, addr!);
}

/**
 * The codec a layout describes: members written in order (padding zeroed),
 * decoded into an object with the members' properties in struct order.
 */
export function structCodec<T>(layout: StructLayout<T>, addr: AddrCodec): Codec<T> {
  const size = layout.size;
  const members = layout.placed;
  if (layout.bare) {
    const value = members.find((f) => f.kind !== 'pad')!;
    const write = writer(value, addr);
    const read = reader(value, addr);
    const pads = members.filter((f) => f.kind === 'pad').map((f) => writer(f, addr));
    return {
      size,
      encode(v, buf = Buffer.alloc(size), off = 0) {
        write(v, buf, off);
        for (const p of pads) p(undefined, buf, off);
        return buf;
      },
      decode: (buf, off = 0) => read(buf, off) as T,
    };
  }
  const props = members.map((f) => f.prop);
  const writes = members.map((f) => writer(f, addr));
  const reads = members.filter((f) => f.kind !== 'pad').map((f) => [f.prop!, reader(f, addr)] as const);
  return {
    size,
    encode(v, buf = Buffer.alloc(size), off = 0) {
      const rec = v as Record<string, unknown>;
      for (let i = 0; i < writes.length; i++) writes[i](props[i] === undefined ? undefined : rec[props[i]!], buf, off);
      return buf;
    },
    decode(buf, off = 0) {
      const out: Record<string, unknown> = {};
      for (const [p, read] of reads) out[p] = read(buf, off);
      return out as T;
    },
  };
}
