/**
 * Netlink sock_diag (NETLINK_SOCK_DIAG): listing the UDP sockets of a network
 * namespace (SOCK_DIAG_BY_FAMILY over inet_diag) and destroying one
 * (SOCK_DESTROY, kernels built with CONFIG_INET_DIAG_DESTROY). kpr uses it
 * where the bpf_sock_destroy kfunc is missing (before 6.5) to end connected
 * UDP sockets whose backend left, as `ss -K` would.
 *
 * A netlink socket belongs to the namespace it was opened in and reports and
 * destroys only that namespace's sockets: `withSockDiag` opens one inside the
 * target namespace and closes it before leaving.
 *
 * Replies are parsed message by message: a dump is one or more datagrams of
 * SOCK_DIAG_BY_FAMILY messages ended by NLMSG_DONE; a destroy is answered by
 * one NLMSG_ERROR (errno 0 is the acknowledgement). Integers in the netlink
 * headers and socket cookies are host order (little-endian on the hosts kpr
 * supports, as everywhere in native/); ports and addresses are network order.
 */
import koffi from 'koffi';
import { constants } from 'node:os';
import { libc } from './libbpf.js';
import { errnoName } from './errors.js';
import { withNetns } from './netns.js';

const E = constants.errno;

const AF_INET = 2;
const AF_INET6 = 10;
const AF_NETLINK = 16;
const SOCK_DGRAM = 2;
const SOCK_CLOEXEC = 0o2000000;
const NETLINK_SOCK_DIAG = 4;
const SOL_SOCKET = 1;
const SO_RCVTIMEO = 20;
const SO_SNDTIMEO = 21;
const MSG_TRUNC = 0x20;
const IPPROTO_UDP = 17;
/** A connected UDP socket is in TCP_ESTABLISHED (ip4_datagram_connect sets it). */
const TCP_ESTABLISHED = 1;

const NLMSG_NOOP = 1;
const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const NLMSG_OVERRUN = 4;
const NLM_F_REQUEST = 0x1;
const NLM_F_ACK = 0x4;
const NLM_F_DUMP = 0x300;
const SOCK_DIAG_BY_FAMILY = 20;
const SOCK_DESTROY = 21;

const NLMSG_HDRLEN = 16;
/** struct inet_diag_sockid: sport, dport, src[4], dst[4], if, cookie[2]. */
const SOCKID_SIZE = 48;
/** struct inet_diag_req_v2: family, protocol, ext, pad, states, id. */
const REQ_V2_SIZE = 8 + SOCKID_SIZE;
/** struct inet_diag_msg: family, state, timer, retrans, id, expires, rqueue, wqueue, uid, inode. */
const DIAG_MSG_SIZE = 4 + SOCKID_SIZE + 20;
const INET_DIAG_NOCOOKIE = 0xffffffff;

/** One datagram of a dump is at most a few pages; MSG_TRUNC tells if one was larger. */
const RECV_BUFFER_SIZE = 256 * 1024;
/** A kernel that does not answer within this is treated as an error, not waited on forever. */
const REPLY_TIMEOUT_S = 5;

export type InetFamily = 4 | 6;

/** A UDP socket as inet_diag reports it. */
export interface UdpSocketEntry {
  family: InetFamily;
  /** Local address and port. */
  src: string;
  sport: number;
  /** Peer address and port (the address it is connected to; 0.0.0.0/:: and 0 when it is not). */
  dst: string;
  dport: number;
  /** The device it is bound to, 0 for none. */
  ifindex: number;
  /** The socket cookie (what bpf_get_socket_cookie returns for it). */
  cookie: bigint;
  inode: number;
  /** The raw inet_diag_sockid, which names exactly this socket in SOCK_DESTROY. */
  sockid: Buffer;
}

export interface UdpDumpFilter {
  family: InetFamily;
  /** Only sockets connected to this peer port (filtered by the kernel). */
  dport?: number;
  /** Only connected sockets (default true; filtered by the kernel by socket state). */
  connectedOnly?: boolean;
}

export interface SockDiagErrorInit {
  op: string;
  errno: number;
  detail?: string;
}

/** A sock_diag request the kernel refused, or a reply kpr cannot read. */
export class SockDiagError extends Error {
  readonly code: string;
  readonly errno: number;
  readonly op: string;

  constructor(init: SockDiagErrorInit) {
    const errno = Math.abs(init.errno);
    const code = errnoName(errno);
    super(`sock_diag ${init.op}: ${code} (errno ${errno})${init.detail ? `: ${init.detail}` : ''}`);
    this.name = 'SockDiagError';
    this.code = code;
    this.errno = errno;
    this.op = init.op;
  }
}

/** What an errno of a sock_diag request means for kpr, when it is not obvious. */
function detailFor(op: string, errno: number): string | undefined {
  if (errno === E.EOPNOTSUPP && op.startsWith('destroy')) {
    return 'the kernel was built without CONFIG_INET_DIAG_DESTROY, so sockets cannot be destroyed through sock_diag';
  }
  if (errno === E.ENOENT && op.startsWith('dump')) return 'no inet_diag handler for UDP (kernel module udp_diag missing?)';
  if (errno === E.EPERM || errno === E.EACCES) return "destroying sockets needs CAP_NET_ADMIN in the socket's network namespace";
  if (errno === E.EAGAIN) return `no reply within ${REPLY_TIMEOUT_S}s`;
  return undefined;
}

function fail(op: string, errno: number, detail = detailFor(op, errno)): SockDiagError {
  return new SockDiagError({ op, errno, detail });
}

function familyNumber(f: InetFamily): number {
  return f === 4 ? AF_INET : AF_INET6;
}

/** Text form of an inet_diag address: IPv4 from the first 4 bytes, IPv6 from all 16 (canonical, as the URL parser writes it). */
function addrText(family: InetFamily, b: Buffer, off: number): string {
  if (family === 4) return `${b[off]}.${b[off + 1]}.${b[off + 2]}.${b[off + 3]}`;
  const groups: string[] = [];
  for (let i = 0; i < 8; i++) groups.push(b.readUInt16BE(off + i * 2).toString(16));
  return new URL(`http://[${groups.join(':')}]/`).hostname.slice(1, -1);
}

function align4(n: number): number {
  return (n + 3) & ~3;
}

export class SockDiag {
  #fd: number;
  #seq = 0;
  readonly #buf = Buffer.alloc(RECV_BUFFER_SIZE);

  private constructor(fd: number) {
    this.#fd = fd;
  }

  /** A sock_diag socket of the calling thread's current network namespace. */
  static open(): SockDiag {
    const lc = libc();
    const fd = lc.socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) throw fail('socket', koffi.errno());
    const tv = Buffer.alloc(16); // struct timeval { long tv_sec; long tv_usec; }
    tv.writeBigInt64LE(BigInt(REPLY_TIMEOUT_S), 0);
    for (const opt of [SO_RCVTIMEO, SO_SNDTIMEO]) {
      if (lc.setsockopt(fd, SOL_SOCKET, opt, tv, tv.length) !== 0) {
        const errno = koffi.errno();
        lc.close(fd);
        throw fail('setsockopt', errno);
      }
    }
    return new SockDiag(fd);
  }

  get closed(): boolean {
    return this.#fd < 0;
  }

  /** The UDP sockets of this namespace that match `filter`, in the kernel's order. */
  dumpUdp(filter: UdpDumpFilter): UdpSocketEntry[] {
    const op = `dump udp${filter.family === 6 ? '6' : ''}`;
    const req = Buffer.alloc(REQ_V2_SIZE);
    req[0] = familyNumber(filter.family);
    req[1] = IPPROTO_UDP;
    req.writeUInt32LE((filter.connectedOnly ?? true) ? 1 << TCP_ESTABLISHED : 0xffffffff, 4);
    // id.idiag_sport stays 0 (any); udp_dump compares idiag_dport with inet_dport when it is not 0.
    req.writeUInt16BE(filter.dport ?? 0, 8 + 2);
    req.writeUInt32LE(INET_DIAG_NOCOOKIE, 8 + 40);
    req.writeUInt32LE(INET_DIAG_NOCOOKIE, 8 + 44);
    const seq = this.#send(op, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, req);
    const out: UdpSocketEntry[] = [];
    this.#receive(op, seq, (type, b, off, len) => {
      if (type === NLMSG_DONE) {
        // The payload is the dump's final status (negative errno when it failed part-way).
        const status = len >= NLMSG_HDRLEN + 4 ? b.readInt32LE(off + NLMSG_HDRLEN) : 0;
        if (status < 0) throw fail(op, -status);
        return true;
      }
      if (type !== SOCK_DIAG_BY_FAMILY) return false;
      if (len < NLMSG_HDRLEN + DIAG_MSG_SIZE) throw fail(op, E.EPROTO, `a reply of ${len} bytes is shorter than inet_diag_msg`);
      out.push(parseDiagMsg(b, off + NLMSG_HDRLEN));
      return false;
    });
    return out;
  }

  /**
   * Destroys one UDP socket (its owner's next call fails with ECONNABORTED).
   * Returns false when no socket has that id and cookie any more (closed or
   * replaced since the dump). Throws SockDiagError otherwise, EOPNOTSUPP
   * when the kernel cannot destroy sockets at all.
   */
  destroyUdp(sock: Pick<UdpSocketEntry, 'family' | 'sockid'>): boolean {
    const errno = this.#destroy(sock.family, sock.sockid);
    if (errno === 0) return true;
    if (errno === E.ENOENT) return false;
    throw fail('destroy udp', errno);
  }

  /**
   * Whether this kernel destroys sockets through sock_diag: asks it to
   * destroy a socket no one can have (all-zero id, cookie 0, which no socket
   * carries), and tells ENOENT (supported) from EOPNOTSUPP. Throws for
   * anything else (no UDP diag handler, no permission).
   */
  canDestroy(): boolean {
    const errno = this.#destroy(4, Buffer.alloc(SOCKID_SIZE));
    if (errno === E.ENOENT) return true;
    if (errno === E.EOPNOTSUPP) return false;
    if (errno === 0) throw fail('destroy probe', E.EPROTO, 'the kernel acknowledged destroying a socket that cannot exist');
    throw fail('destroy probe', errno);
  }

  close(): void {
    if (this.#fd < 0) return;
    libc().close(this.#fd);
    this.#fd = -1;
  }

  #destroy(family: InetFamily, sockid: Buffer): number {
    if (sockid.length !== SOCKID_SIZE) throw new RangeError(`inet_diag_sockid is ${SOCKID_SIZE} bytes, got ${sockid.length}`);
    const op = 'destroy udp';
    const req = Buffer.alloc(REQ_V2_SIZE);
    req[0] = familyNumber(family);
    req[1] = IPPROTO_UDP;
    req.writeUInt32LE(0xffffffff, 4);
    sockid.copy(req, 8);
    const seq = this.#send(op, SOCK_DESTROY, NLM_F_REQUEST | NLM_F_ACK, req);
    let errno = -1;
    this.#receive(
      op,
      seq,
      (type, b, off, len) => {
        if (type !== NLMSG_ERROR) return false;
        if (len < NLMSG_HDRLEN + 4) throw fail(op, E.EPROTO, 'truncated NLMSG_ERROR');
        errno = -b.readInt32LE(off + NLMSG_HDRLEN);
        return true;
      },
      true,
    );
    return errno;
  }

  #send(op: string, type: number, flags: number, payload: Buffer): number {
    if (this.#fd < 0) throw fail(op, E.EBADF, 'the sock_diag socket is closed');
    const seq = (this.#seq = (this.#seq + 1) >>> 0);
    const msg = Buffer.alloc(NLMSG_HDRLEN + payload.length);
    msg.writeUInt32LE(msg.length, 0);
    msg.writeUInt16LE(type, 4);
    msg.writeUInt16LE(flags, 6);
    msg.writeUInt32LE(seq, 8);
    msg.writeUInt32LE(0, 12); // nlmsg_pid 0: the kernel fills in our port id
    payload.copy(msg, NLMSG_HDRLEN);
    for (;;) {
      const n = libc().send(this.#fd, msg, msg.length, 0);
      if (n === msg.length) return seq;
      const errno = n < 0 ? koffi.errno() : E.EMSGSIZE;
      if (errno !== E.EINTR) throw fail(op, errno);
    }
  }

  /**
   * Reads replies to request `seq` until `onMessage` returns true. Replies to
   * other sequence numbers (a request that timed out earlier) are skipped.
   * An NLMSG_ERROR with a non-zero errno ends the exchange with that error,
   * unless `errorIsReply` hands it to `onMessage` (an acknowledged request).
   */
  #receive(op: string, seq: number, onMessage: (type: number, b: Buffer, off: number, len: number) => boolean, errorIsReply = false): void {
    const buf = this.#buf;
    for (;;) {
      const n = libc().recv(this.#fd, buf, buf.length, MSG_TRUNC);
      if (n < 0) {
        const errno = koffi.errno();
        if (errno === E.EINTR) continue;
        throw fail(op, errno);
      }
      if (n > buf.length) throw fail(op, E.EMSGSIZE, `a reply datagram of ${n} bytes exceeds the ${buf.length}-byte buffer`);
      if (n === 0) throw fail(op, E.EPROTO, 'empty reply');
      for (let off = 0; off < n;) {
        if (n - off < NLMSG_HDRLEN) throw fail(op, E.EPROTO, `${n - off} trailing bytes, shorter than a netlink header`);
        const len = buf.readUInt32LE(off);
        if (len < NLMSG_HDRLEN || off + len > n) throw fail(op, E.EPROTO, `netlink message length ${len} at offset ${off} of ${n}`);
        const type = buf.readUInt16LE(off + 4);
        const msgSeq = buf.readUInt32LE(off + 8);
        if (msgSeq === seq && type !== NLMSG_NOOP) {
          if (type === NLMSG_OVERRUN) throw fail(op, E.ENOBUFS, 'netlink overrun');
          if (type === NLMSG_ERROR && !errorIsReply) {
            if (len < NLMSG_HDRLEN + 4) throw fail(op, E.EPROTO, 'truncated NLMSG_ERROR');
            const errno = -buf.readInt32LE(off + NLMSG_HDRLEN);
            if (errno !== 0) throw fail(op, errno);
            return; // an acknowledgement ends the exchange
          }
          if (onMessage(type, buf, off, len)) return;
        }
        off += align4(len);
      }
    }
  }
}

function parseDiagMsg(b: Buffer, off: number): UdpSocketEntry {
  const family: InetFamily = b[off] === AF_INET6 ? 6 : 4;
  const id = off + 4;
  return {
    family,
    sport: b.readUInt16BE(id),
    dport: b.readUInt16BE(id + 2),
    src: addrText(family, b, id + 4),
    dst: addrText(family, b, id + 20),
    ifindex: b.readUInt32LE(id + 36),
    cookie: (BigInt(b.readUInt32LE(id + 44)) << 32n) | BigInt(b.readUInt32LE(id + 40)),
    inode: b.readUInt32LE(off + 68),
    sockid: Buffer.from(b.subarray(id, id + SOCKID_SIZE)),
  };
}

/**
 * Runs `fn` with a sock_diag socket of the network namespace at `nsPath`
 * (the current one when undefined). The socket is opened inside that
 * namespace and closed before this returns; `fn` itself runs there too.
 */
export function withSockDiag<T>(nsPath: string | undefined, fn: (diag: SockDiag) => T): T {
  const run = () => {
    const diag = SockDiag.open();
    try {
      return fn(diag);
    } finally {
      diag.close();
    }
  };
  return nsPath === undefined ? run() : withNetns(nsPath, run);
}
