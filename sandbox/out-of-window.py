#!/usr/bin/env python3
"""The two ends of upstream's invalid-conntrack-state check (kubernetes e2e
conntrack.go, boom-server: regression test for kubernetes#74839), for the
sandbox's pod namespaces.

  out-of-window.py server PORT          (in the backend pod: needs CAP_NET_RAW)
  out-of-window.py client HOST PORT     (in the client pod)

The server accepts one connection, reads "hello", answers "ok", then sends
the client, from a raw socket, three TCP segments of that connection whose
sequence number is a gigabyte past the window (as a segment that overtook
its predecessors by far would be): netfilter conntrack calls them INVALID. A proxy
that rewrote the connection's addresses in a NAT table and lets INVALID
packets through un-rewritten makes the client's kernel see a segment of no
connection it knows and answer with a RST, which resets the server's socket.
Then the client sends "again" (when told to on stdin) and the server answers
"ok again" if the connection survived. The server reports on stdout:
"ready", "connection established <client>", "bad packets sent", then
"RST from client" or "no RST", then "answered" or "ERROR <why>". The client
reports "connected", then "reply <line>" or "ERROR <why>".
"""
import socket
import struct
import sys

ACK, PSH, RST = 0x10, 0x08, 0x04


def say(line):
    print(line, flush=True)


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def segment(src, dst, sport, dport, seq, ack, flags, payload):
    """A TCP header and payload, its checksum over the IPv4 pseudo-header (the kernel adds the IP header)."""
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 64240, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(hdr) + len(payload))
    csum = checksum(pseudo + hdr + payload)
    return hdr[:16] + struct.pack("!H", csum) + hdr[18:] + payload


def parse(pkt):
    """(src, sport, dport, seq, ack, flags, payload) of an IPv4 TCP packet as a raw socket receives it."""
    ihl = (pkt[0] & 0x0F) * 4
    src = socket.inet_ntoa(pkt[12:16])
    sport, dport, seq, ack, off, flags = struct.unpack("!HHIIBB", pkt[ihl:ihl + 14])
    return src, sport, dport, seq, ack, flags, pkt[ihl + (off >> 4) * 4:]


def read_line(conn):
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf.decode().strip()


def server(port):
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)  # a copy of every TCP packet received
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("0.0.0.0", port))
    lst.listen(1)
    say("ready")
    conn, (caddr, cport) = lst.accept()
    local = conn.getsockname()[0]
    say(f"connection established {caddr}:{cport}")
    if read_line(conn) != "hello":
        raise SystemExit("ERROR expected hello")
    # The client's "hello" segment: its seq (+ length) is what the client sends next, its ack what it expects from us.
    raw.settimeout(5)
    while True:
        src, sport, dport, seq, ack, flags, payload = parse(raw.recv(65535))
        if src == caddr and sport == cport and dport == port and payload == b"hello\n":
            client_next, server_next = (seq + len(payload)) & 0xFFFFFFFF, ack
            break
    conn.sendall(b"ok\n")
    server_next = (server_next + 3) & 0xFFFFFFFF
    # A gigabyte ahead: past the end of any window conntrack allows (a segment behind the window, an old
    # retransmission, is only ignored by conntrack since Linux 6.1, not marked INVALID).
    stale = (server_next + 1_000_000_000) & 0xFFFFFFFF
    for i in range(3):
        raw.sendto(segment(local, caddr, port, cport, (stale + 5 * i) & 0xFFFFFFFF, client_next, ACK | PSH, b"boom\n"), (caddr, 0))
    say("bad packets sent")
    try:
        line = read_line(conn)
        conn.sendall(f"ok {line}\n".encode())
        answered = "answered"
    except OSError as err:
        answered = f"ERROR {err}"
    raw.setblocking(False)
    rst = False
    while True:
        try:
            src, sport, dport, _, _, flags, _ = parse(raw.recv(65535))
        except BlockingIOError:
            break
        if src == caddr and sport == cport and dport == port and flags & RST:
            rst = True
    say("RST from client" if rst else "no RST")
    say(answered)


def client(host, port):
    conn = socket.create_connection((host, port), timeout=10)
    conn.sendall(b"hello\n")
    if read_line(conn) != "ok":
        raise SystemExit("ERROR expected ok")
    say("connected")
    sys.stdin.readline()
    try:
        conn.sendall(b"again\n")
        say(f"reply {read_line(conn)}")
    except OSError as err:
        say(f"ERROR {err}")


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]))
    else:
        client(sys.argv[2], int(sys.argv[3]))
