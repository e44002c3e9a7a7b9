/**
 * How `kpr map dump` shows each pinned map: one line per map in DECODERS,
 * naming its key and value decoders (agent/maps/layout.ts codecs) and
 * turning numbers into names (protocols, flags, stat names). A new map is
 * one more line.
 */
import {
  BE_FLAG,
  CFG_FLAG,
  CT_DIR,
  CT_FLAG,
  MAP_NAMES,
  STAT,
  VIP_FLAG,
  decodeAddr,
  decodeAffinityKey,
  decodeAffinityMatchKey,
  decodeAffinityVal,
  decodeBackend,
  decodeBackendId,
  decodeConfig,
  decodeCtKey,
  decodeCtVal,
  decodeRevNatKey,
  decodeRevNatVal,
  decodeSrcRangeKey,
  decodeSvcKey,
  decodeTermKey,
  decodeSvcMeta,
  decodeSvcVal,
  decodeVipKey,
  decodeVipVal,
} from '../maps/layout.js';
import { sumPerCpuU64 } from '../../native/index.js';
import { bitNames, flagNames, frontendTypeName, protoName, scopeName } from './service-view.js';

export type Row = Record<string, unknown>;

export interface MapDecoder {
  /** Decodes the key at `off` of the keys buffer. */
  key(buf: Buffer, off: number): Row;
  /**
   * Decodes one value; `value` is the whole value (all CPU slots for per-CPU
   * maps, `slot` bytes each); `key` is the decoded key.
   */
  value(value: Buffer, slot: number, key: Row): Row;
  /** What the map holds, for `kpr map list`. */
  about: string;
}

const u32 = (b: Buffer, o: number) => b.readUInt32LE(o);
const STAT_NAMES = new Map<number, string>(Object.entries(STAT).map(([name, i]) => [i, name.toLowerCase()]));
const CT_DIR_NAMES = new Map<number, string>(Object.entries(CT_DIR).map(([name, i]) => [i, name.toLowerCase()]));

function termKeyRow(b: Buffer, o: number): Row {
  const k = decodeTermKey(b, o);
  return { address: k.addr, port: k.port, revNatId: k.revNatId, protocol: protoName(k.proto) };
}

/** Nanosecond clocks are u64: shown as decimal strings so JSON keeps every digit. */
const big = (n: bigint) => n.toString();

export const DECODERS: Record<string, MapDecoder> = {
  [MAP_NAMES.svc]: {
    about: 'frontends: slot 0 = master {count, id, flags}, slots 1..count = backend ids',
    key: (b, o) => {
      const k = decodeSvcKey(b, o);
      return { address: k.addr, port: k.port, protocol: protoName(k.proto), scope: scopeName(k.scope), slot: k.slot };
    },
    value: (v, _slot, key) => {
      const d = decodeSvcVal(v, 0);
      return key.slot === 0
        ? { count: d.count, id: d.revNatId, flags: flagNames(d.flags), ...(d.backendId ? { affinityTimeoutSeconds: d.backendId } : {}) }
        : { backendId: d.backendId };
    },
  },
  [MAP_NAMES.backend]: {
    about: 'backend id -> address, port, protocol',
    key: (b, o) => ({ id: decodeBackendId(b, o) }),
    value: (v) => {
      const d = decodeBackend(v, 0);
      return { address: d.addr, port: d.port, protocol: protoName(d.proto), flags: bitNames(d.flags, BE_FLAG) };
    },
  },
  [MAP_NAMES.vip]: {
    about: 'service addresses; unknown ports on them are refused',
    key: (b, o) => ({ address: decodeVipKey(b, o) }),
    value: (v) => ({ flags: bitNames(decodeVipVal(v, 0), VIP_FLAG) }),
  },
  [MAP_NAMES.revnat]: {
    about: 'socket reverse NAT: (socket cookie, backend) -> the frontend it called',
    key: (b, o) => {
      const k = decodeRevNatKey(b, o);
      return { cookie: big(k.cookie), backend: k.addr, backendPort: k.port };
    },
    value: (v) => {
      const d = decodeRevNatVal(v, 0);
      return { address: d.addr, port: d.port, id: d.revNatId };
    },
  },
  [MAP_NAMES.affinity]: {
    about: 'session affinity: (netns cookie or client, frontend id) -> backend',
    key: (b, o) => {
      const k = decodeAffinityKey(b, o);
      return { netnsCookie: big(k.netnsCookie), client: k.client, id: k.revNatId };
    },
    value: (v) => {
      const d = decodeAffinityVal(v, 0);
      return { backendId: d.backendId, lastUsedNs: big(d.lastUsedNs) };
    },
  },
  [MAP_NAMES.affinityMatch]: {
    about: 'valid (backend, frontend) pairs of frontends with affinity',
    key: (b, o) => {
      const k = decodeAffinityMatchKey(b, o);
      return { backendId: k.backendId, id: k.revNatId };
    },
    value: () => ({}),
  },
  [MAP_NAMES.term]: {
    about: 'UDP backends whose connected sockets are to be destroyed',
    key: termKeyRow,
    value: () => ({}),
  },
  [MAP_NAMES.svcMeta]: {
    about: 'frontend id -> service name, port name, type',
    key: (b, o) => ({ id: u32(b, o) }),
    value: (v) => {
      const d = decodeSvcMeta(v, 0);
      return { service: d.name, portName: d.portName, type: frontendTypeName(d.type) };
    },
  },
  [MAP_NAMES.ct]: {
    about: 'tc-path connection tracking',
    key: (b, o) => {
      const k = decodeCtKey(b, o);
      return { source: k.saddr, sourcePort: k.sport, destination: k.daddr, destinationPort: k.dport, protocol: protoName(k.proto), dir: CT_DIR_NAMES.get(k.dir) ?? k.dir };
    },
    value: (v) => {
      const d = decodeCtVal(v, 0);
      return {
        natSource: d.natSaddr,
        natSourcePort: d.natSport,
        natDestination: d.natDaddr,
        natDestinationPort: d.natDport,
        backendId: d.backendId,
        id: d.revNatId,
        flags: bitNames(d.flags, CT_FLAG),
        expiresNs: big(d.expiresNs),
      };
    },
  },
  [MAP_NAMES.srcRange]: {
    about: 'loadBalancerSourceRanges: (frontend id, CIDR) allowed',
    key: (b, o) => {
      const k = decodeSrcRangeKey(b, o);
      return { id: k.revNatId, cidr: k.cidr };
    },
    value: () => ({}),
  },
  [MAP_NAMES.config]: {
    about: 'node-wide datapath settings',
    key: (b, o) => ({ index: u32(b, o) }),
    value: (v) => {
      const c = decodeConfig(v, 0);
      return {
        hostNetnsCookie: big(c.hostNetnsCookie),
        snatV4: c.snatV4,
        snatV6: c.snatV6,
        tcpTimeoutSeconds: c.tcpTimeoutS,
        tcpClosingTimeoutSeconds: c.tcpClosingTimeoutS,
        udpTimeoutSeconds: c.udpTimeoutS,
        flags: bitNames(c.flags, CFG_FLAG),
      };
    },
  },
  [MAP_NAMES.stats]: {
    about: 'datapath counters (per CPU)',
    key: (b, o) => {
      const i = u32(b, o);
      return { index: i, stat: STAT_NAMES.get(i) ?? `unused-${i}` };
    },
    value: (v, slot) => {
      const perCpu: string[] = [];
      for (let off = 0; off + 8 <= v.length; off += slot) perCpu.push(big(v.readBigUInt64LE(off)));
      return { total: big(sumPerCpuU64(v, slot, 0)), perCpu };
    },
  },
};

export function knownMapNames(): string[] {
  return Object.keys(DECODERS).sort();
}
