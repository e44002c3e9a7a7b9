/**
 * UDP socket termination without bpf_sock_destroy (kernels before 6.5):
 * netlink sock_diag lists the connected UDP sockets of one network namespace
 * and destroys those the socket hooks connected to a backend that left, with
 * the same rule as kpr_sock_term.bpf.c: the socket's cookie, peer address and
 * port must have a kpr_revnat entry (kpr translated it), and that entry's
 * frontend must be the one the backend left (kpr_term's key, built here in JS).
 */
import { withSockDiag, type BpfMap, type InetFamily, type UdpSocketEntry } from '../../native/index.js';
import { IPPROTO, REVNAT_KEY, decodeRevNatVal, encodeRevNatKey, encodeTermKey } from '../maps/layout.js';
import { isCanonicalIPv4 } from '../net/ip.js';

/** A UDP backend that left a frontend (the frontend's frontendId). */
export interface UdpBackendLeft {
  addr: string;
  port: number;
  frontendId: number;
}

/** The (backend, port, frontend) triples that left, as kpr_term keys, and what to ask the kernel for. */
export interface SockDiagTargets {
  /** encodeTermKey bytes (hex) of every pair that left. */
  termKeys: Set<string>;
  /** Peer ports to dump, per socket family (IPv4 backends are also reached by IPv4-mapped IPv6 sockets). */
  ports: Map<InetFamily, Set<number>>;
}

export function sockDiagTargets(backends: UdpBackendLeft[]): SockDiagTargets {
  const termKeys = new Set<string>();
  const ports = new Map<InetFamily, Set<number>>([
    [4, new Set()],
    [6, new Set()],
  ]);
  for (const b of backends) {
    termKeys.add(encodeTermKey({ addr: b.addr, port: b.port, frontendId: b.frontendId, proto: IPPROTO.UDP }).toString('hex'));
    if (isCanonicalIPv4(b.addr)) ports.get(4)!.add(b.port);
    ports.get(6)!.add(b.port);
  }
  return { termKeys, ports };
}

/**
 * Whether a listed socket is one to destroy: kpr translated it (kpr_revnat
 * has its cookie with this peer) for a frontend the peer left.
 */
export function socketToDestroy(s: UdpSocketEntry, revnat: BpfMap, termKeys: Set<string>, key: Buffer = Buffer.alloc(REVNAT_KEY.size)): boolean {
  if (s.dport === 0) return false;
  encodeRevNatKey({ cookie: s.cookie, addr: s.dst, port: s.dport }, key);
  const val = revnat.lookup(key);
  if (!val) return false;
  const { frontendId } = decodeRevNatVal(val);
  return termKeys.has(encodeTermKey({ addr: s.dst, port: s.dport, frontendId, proto: IPPROTO.UDP }).toString('hex'));
}

export interface SockDiagScan {
  /** Sockets destroyed. */
  destroyed: number;
  /** Sockets that matched but were gone (closed or replaced) by the time of the destroy. */
  gone: number;
}

/**
 * Destroys, in the namespace at `nsPath`, the connected UDP sockets of
 * `targets`. Throws (SockDiagError) when the kernel refuses a request; a
 * socket that vanished meanwhile is only counted.
 */
export function destroyInNamespace(nsPath: string, targets: SockDiagTargets, revnat: BpfMap): SockDiagScan {
  const key = Buffer.alloc(REVNAT_KEY.size);
  return withSockDiag(nsPath, (diag) => {
    const scan: SockDiagScan = { destroyed: 0, gone: 0 };
    for (const [family, ports] of targets.ports) {
      for (const dport of ports) {
        for (const s of diag.dumpUdp({ family, dport })) {
          if (!socketToDestroy(s, revnat, targets.termKeys, key)) continue;
          if (diag.destroyUdp(s)) scan.destroyed++;
          else scan.gone++;
        }
      }
    }
    return scan;
  });
}
