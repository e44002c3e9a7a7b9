/**
 * An EndpointSlice as the watch cache holds it: its endpoints packed into
 * two strings and a table of node names instead of one object (and one
 * address string) each. At 100,000 slices of 10 endpoints the objects were
 * most of the agent's heap (~1 KB a slice: 10 endpoint objects of 56 bytes,
 * 10 address strings of 32, the array); packed, a slice's endpoints cost
 * ~250 bytes.
 *
 *   addresses  every endpoint's single address, joined by a space
 *   codes      one UTF-16 unit per endpoint: its conditions (CONDITION_BITS,
 *              see conditionsCode) and, above them, 1 + the index of its
 *              nodeName in `nodes` (0: no nodeName)
 *   nodes      the slice's distinct node names (shared strings)
 *   hints      per endpoint, when any endpoint has hints
 *
 * `endpoints` rebuilds the V1Endpoint list on each read (CachedEndpoint
 * objects, sharing the frozen conditions): the planner reads it once per
 * sync of the slice's Service, and the young generation takes the copies.
 * A slice the packing cannot hold exactly (an endpoint with no address or
 * several, an address with a space, conditions or a nodeName of the wrong
 * type, more distinct nodes than the codes can name) is not packed: packOf
 * returns undefined and the caller keeps endpoint objects.
 *
 * Cached objects are never mutated (the plan is pure); toJSON prints the
 * V1EndpointSlice the packing stands for, so the reflector's comparisons
 * and any log of the object see the same fields as before.
 */
import {
  V1EndpointSlice,
  type DiscoveryV1EndpointPort,
  type V1Endpoint,
  type V1EndpointConditions,
  type V1EndpointHints,
  type V1ObjectMeta,
} from '@kubernetes/client-node';

/** Conditions codes 0..26 are (ready, serving, terminating) each absent/true/false; NO_CONDITIONS is no conditions object. */
const NO_CONDITIONS = 27;
const CONDITION_BITS = 5;
/** Node slots that fit in a code unit above the condition bits (slot 0 is "no nodeName"). */
const MAX_NODES = (0xffff >> CONDITION_BITS) - 1;
const SEPARATOR = ' ';
const CODES_PER_CALL = 4096;

/**
 * A cached endpoint with one address: the address is held directly and
 * `addresses` builds the one-element array when read. JSON.stringify still
 * prints a V1Endpoint (toJSON).
 */
export class CachedEndpoint implements V1Endpoint {
  readonly conditions: V1EndpointConditions | undefined;
  readonly nodeName: string | undefined;
  readonly hints: V1EndpointHints | undefined;
  readonly #address: string;

  constructor(address: string, conditions: V1EndpointConditions | undefined, nodeName: string | undefined, hints: V1EndpointHints | undefined) {
    this.#address = address;
    this.conditions = conditions;
    this.nodeName = nodeName;
    this.hints = hints;
  }

  get addresses(): string[] {
    return [this.#address];
  }

  /** addresses[0] without building the array (the planner reads it for every endpoint of every sync). */
  get firstAddress(): string {
    return this.#address;
  }

  toJSON(): V1Endpoint {
    const out: V1Endpoint = { addresses: this.addresses };
    if (this.conditions !== undefined) out.conditions = this.conditions;
    if (this.nodeName !== undefined) out.nodeName = this.nodeName;
    if (this.hints !== undefined) out.hints = this.hints;
    return out;
  }
}

function tri(v: unknown): number {
  return v === true ? 1 : v === false ? 2 : 0;
}

/** One frozen V1EndpointConditions per code: shared by every endpoint with the same conditions. */
const conditionsByCode: Array<V1EndpointConditions | undefined> = [];

function conditionsOf(code: number): V1EndpointConditions | undefined {
  if (code === NO_CONDITIONS) return undefined;
  let shared = conditionsByCode[code];
  if (!shared) {
    const c: V1EndpointConditions = {};
    const ready = Math.floor(code / 9);
    const serving = Math.floor(code / 3) % 3;
    const terminating = code % 3;
    if (ready) c.ready = ready === 1;
    if (serving) c.serving = serving === 1;
    if (terminating) c.terminating = terminating === 1;
    conditionsByCode[code] = shared = Object.freeze(c);
  }
  return shared;
}

/** The code of conditions made of booleans or absences (or of no conditions); -1 for anything else. */
function conditionsCode(c: unknown): number {
  if (c === undefined) return NO_CONDITIONS;
  if (c === null || typeof c !== 'object') return -1;
  const { ready, serving, terminating } = c as V1EndpointConditions;
  if ([ready, serving, terminating].some((v) => v !== undefined && typeof v !== 'boolean')) return -1;
  return tri(ready) * 9 + tri(serving) * 3 + tri(terminating);
}

/** The shared frozen conditions equal to `c`; `c` itself when it holds something other than booleans. */
export function internConditions(c: V1EndpointConditions | undefined): V1EndpointConditions | undefined {
  const code = conditionsCode(c);
  return code < 0 ? c : conditionsOf(code);
}

export interface PackedEndpoints {
  addresses: string;
  codes: string;
  nodes: readonly string[];
  hints: ReadonlyArray<V1EndpointHints | undefined> | undefined;
}

/** The packed form of `endpoints`, or undefined when it cannot hold them exactly (see above). `intern` shares node names. */
export function packOf(endpoints: readonly V1Endpoint[], intern: (s: string) => string): PackedEndpoints | undefined {
  const n = endpoints.length;
  const addrs = new Array<string>(n);
  const codes = new Array<number>(n);
  const nodes: string[] = [];
  let hints: Array<V1EndpointHints | undefined> | undefined;
  for (let i = 0; i < n; i++) {
    const e = endpoints[i];
    if (!e || typeof e !== 'object') return undefined;
    const a = e.addresses;
    if (!Array.isArray(a) || a.length !== 1 || typeof a[0] !== 'string' || a[0].includes(SEPARATOR)) return undefined;
    const cond = conditionsCode(e.conditions);
    if (cond < 0) return undefined;
    let slot = 0;
    if (e.nodeName !== undefined) {
      if (typeof e.nodeName !== 'string') return undefined;
      slot = nodes.indexOf(e.nodeName) + 1;
      if (slot === 0) {
        if (nodes.length === MAX_NODES) return undefined;
        slot = nodes.push(intern(e.nodeName));
      }
    }
    if (e.hints !== undefined) (hints ??= new Array<V1EndpointHints | undefined>(n).fill(undefined))[i] = e.hints;
    addrs[i] = a[0];
    codes[i] = cond | (slot << CONDITION_BITS);
  }
  let packedCodes = '';
  // In chunks: one call with a slice's every code as arguments could overflow the stack.
  for (let i = 0; i < n; i += CODES_PER_CALL) packedCodes += String.fromCharCode(...codes.slice(i, i + CODES_PER_CALL));
  // nodes.slice(): exact length (push reserved 17 slots, 152 bytes, for the one or two nodes of most slices).
  return { addresses: addrs.join(SEPARATOR), codes: packedCodes, nodes: nodes.slice(), hints };
}

export class CompactEndpointSlice implements V1EndpointSlice {
  readonly metadata: V1ObjectMeta;
  readonly addressType: string;
  readonly ports: DiscoveryV1EndpointPort[] | undefined;
  readonly #addresses: string;
  readonly #codes: string;
  readonly #nodes: readonly string[];
  readonly #hints: ReadonlyArray<V1EndpointHints | undefined> | undefined;

  constructor(metadata: V1ObjectMeta, addressType: string, ports: DiscoveryV1EndpointPort[] | undefined, packed: PackedEndpoints) {
    this.metadata = metadata;
    this.addressType = addressType;
    this.ports = ports;
    this.#addresses = packed.addresses;
    this.#codes = packed.codes;
    this.#nodes = packed.nodes;
    this.#hints = packed.hints;
  }

  /** A new list on each read (see above). */
  get endpoints(): V1Endpoint[] {
    const codes = this.#codes;
    const n = codes.length;
    if (n === 0) return [];
    const addrs = this.#addresses.split(SEPARATOR);
    const out = new Array<V1Endpoint>(n);
    for (let i = 0; i < n; i++) {
      const code = codes.charCodeAt(i);
      const slot = code >> CONDITION_BITS;
      out[i] = new CachedEndpoint(addrs[i], conditionsOf(code & ((1 << CONDITION_BITS) - 1)), slot === 0 ? undefined : this.#nodes[slot - 1], this.#hints?.[i]);
    }
    return out;
  }

  toJSON(): V1EndpointSlice {
    const out: V1EndpointSlice = { metadata: this.metadata, addressType: this.addressType, endpoints: this.endpoints };
    if (this.ports !== undefined) out.ports = this.ports;
    return out;
  }
}

// A V1EndpointSlice to instanceof like every typed object of the caches; not
// `extends`, which TypeScript refuses for an accessor over a declared field.
Object.setPrototypeOf(CompactEndpointSlice.prototype, V1EndpointSlice.prototype);
