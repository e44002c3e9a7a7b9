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
  /** An array of `size` / 2 __u16 (a Uint16Array; encoded from any array of numbers, zeros past its end). */
  | 'u16s'
  /** `size` zero bytes, not decoded. */
  | 'pad';

const SIZED = new Set<FieldKind>(['cstr', 'pad', 'u16s']);

const KIND_SIZE: Record<Exclude<FieldKind, 'cstr' | 'pad' | 'u16s'>, number> = { u8: 1, u16: 2, be16: 2, u32: 4, u64: 8, addr: 16, addrOrEmpty: 16 };

export interface FieldSpec {
  /** Member name in the C struct. */
  readonly c: string;
  readonly kind: FieldKind;
  /** Bytes, for cstr, u16s and pad (the other kinds have theirs). */
  readonly size?: number;
  /** Property of the TypeScript object; default: `c` in camelCase (frontend_id → frontendId). */
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
      const size = SIZED.has(s.kind) ? s.size! : KIND_SIZE[s.kind as keyof typeof KIND_SIZE];
      const f: PlacedField = { c: s.c, offset, size, kind: s.kind };
      if (s.kind !== 'pad') f.prop = s.prop ?? camel(s.c);
      offset += size;
      return f;
    });
    const at = Object.fromEntries(placed.map((f) => [f.c, f.offset])) as Record<F[number]['c'], number>;
    const sizes = Object.fromEntries(placed.map((f) => [f.c, f.size])) as Record<F[number]['c'], number>;
    return {
      cName,
      size: offset,
      fields: placed.map(({ c, offset: o, size }) => ({ c, offset: o, size })),
      placed,
      at,
      sizes,
      bare: opts.bare ?? false,
      scalar: false,
    };
  };
}

/** A bare scalar (the key of an array or of an id-keyed map, a presence byte, a counter). */
export function scalarLayout<T extends number | bigint>(cName: '__u8' | '__u32' | '__u64', kind: 'u8' | 'u32' | 'u64'): StructLayout<T, never> {
  const size = KIND_SIZE[kind];
  return {
    cName,
    size,
    fields: [],
    placed: [{ c: '', offset: 0, size, kind, prop: '' }],
    at: {} as Record<never, number>,
    sizes: {} as Record<never, number>,
    bare: true,
    scalar: true,
  };
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

/** `size` bytes of little-endian __u16s, copied out. */
function readU16s(buf: Buffer, off: number, size: number): Uint16Array {
  const out = new Uint16Array(size / 2);
  for (let i = 0; i < out.length; i++) out[i] = buf.readUInt16LE(off + 2 * i);
  return out;
}

/** The numbers of `v` as __u16s (a value out of range throws, as the other members do), zeros past its end. */
function writeU16s(v: ArrayLike<number>, buf: Buffer, off: number, size: number): void {
  const n = size / 2;
  if (v.length > n) throw new RangeError(`${v.length} values for an array of ${n}`);
  for (let i = 0; i < v.length; i++) buf.writeUInt16LE(v[i], off + 2 * i);
  buf.fill(0, off + 2 * v.length, off + size);
}

function isZero(buf: Buffer, off: number, size: number): boolean {
  for (let i = 0; i < size; i++) if (buf[off + i] !== 0) return false;
  return true;
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
    case 'u16s':
      return (b, off) => readU16s(b, off + o, size);
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

/** The statement writing member `f` from the expression `v` (buffer `buf`, record at `off`). */
function writeStatement(f: PlacedField, v: string): string {
  const at = `off + ${f.offset}`;
  switch (f.kind) {
    case 'u8':
      return `buf[${at}] = ${v};`;
    case 'u16':
      return `buf.writeUInt16LE(${v}, ${at});`;
    case 'be16':
      return `buf.writeUInt16BE(${v}, ${at});`;
    case 'u32':
      return `buf.writeUInt32LE(${v}, ${at});`;
    case 'u64':
      return `buf.writeBigUInt64LE(${v}, ${at});`;
    case 'addr':
      return `addr.encode(${v}, buf, ${at});`;
    case 'addrOrEmpty':
      return `if (${v}) addr.encode(${v}, buf, ${at}); else buf.fill(0, ${at}, ${at} + 16);`;
    case 'cstr':
      return `writeCString(${v}, buf, ${at}, ${f.size});`;
    case 'u16s':
      return `writeU16s(${v}, buf, ${at}, ${f.size});`;
    case 'pad':
      return f.size <= 8 ? Array.from({ length: f.size }, (_, i) => `buf[${at} + ${i}] = 0;`).join(' ') : `buf.fill(0, ${at}, ${at} + ${f.size});`;
  }
}

/** The expression reading member `f`. */
function readExpression(f: PlacedField): string {
  const at = `off + ${f.offset}`;
  switch (f.kind) {
    case 'u8':
      return `buf[${at}]`;
    case 'u16':
      return `buf.readUInt16LE(${at})`;
    case 'be16':
      return `buf.readUInt16BE(${at})`;
    case 'u32':
      return `buf.readUInt32LE(${at})`;
    case 'u64':
      return `buf.readBigUInt64LE(${at})`;
    case 'addr':
      return `addr.decode(buf, ${at})`;
    case 'addrOrEmpty':
      return `(isZero(buf, ${at}, 16) ? '' : addr.decode(buf, ${at}))`;
    case 'cstr':
      return `readCString(buf, ${at}, ${f.size})`;
    case 'u16s':
      return `readU16s(buf, ${at}, ${f.size})`;
    case 'pad':
      throw new Error('padding is not read');
  }
}

/**
 * The codec a layout describes: members written in order (padding zeroed),
 * decoded into an object with the members' properties in struct order.
 * Each codec is compiled once into straight-line code (one statement per
 * member, an object literal per decode), so it runs as fast as one written
 * by hand: the registry's member names and kinds are all that goes into it.
 */
export function structCodec<T>(layout: StructLayout<T>, addr: AddrCodec): Codec<T> {
  const members = layout.placed;
  for (const f of members)
    if (f.prop !== undefined && f.prop !== '' && !/^[A-Za-z_$][\w$]*$/.test(f.prop)) throw new Error(`${layout.cName}: bad property name ${f.prop}`);
  const value = layout.bare ? members.find((f) => f.kind !== 'pad')! : undefined;
  const writes = members.map((f) => writeStatement(f, f === value ? 'v' : `v.${f.prop}`)).join('\n');
  const read = value
    ? readExpression(value)
    : `{ ${members
        .filter((f) => f.kind !== 'pad')
        .map((f) => `${f.prop}: ${readExpression(f)}`)
        .join(', ')} }`;
  const size = layout.size;
  const source = `
    return {
      size: ${size},
      encode(v, buf = Buffer.alloc(${size}), off = 0) {
        ${writes}
        return buf;
      },
      decode(buf, off = 0) {
        return ${read};
      },
    };`;
  return new Function('Buffer', 'addr', 'writeCString', 'readCString', 'writeU16s', 'readU16s', 'isZero', source)(
    Buffer,
    addr,
    writeCString,
    readCString,
    writeU16s,
    readU16s,
    isZero,
  ) as Codec<T>;
}
