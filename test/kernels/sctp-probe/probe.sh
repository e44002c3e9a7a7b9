#!/usr/bin/env bash
# Which cgroup sock_addr hooks run for SCTP sockets (rule 39 of docs/semantics.md)?
#
#   test/kernels/sctp-probe/probe.sh SERIES   # on the host: build, then boot SERIES (5.10, 6.1, 6.12) under QEMU
#   test/kernels/sctp-probe/probe.sh guest DIR  # what the guest runs (or this kernel, if it has SCTP)
#
# Not part of make test: a kernel fact, checked by hand. On 5.10 it printed
# ENETUNREACH for stream and seqpacket to 198.18.0.1 (connect4/sendmsg4 never
# ran: no rewrite), a peer of 198.18.0.1:9000 for the stream association to
# 127.0.0.1 (getpeername4 ran), and a working association to 127.0.0.1 and ::1.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"

if [ "${1:-}" != guest ]; then
  series="${1:?usage: probe.sh SERIES | guest DIR}"
  out="$REPO/build/sctp-probe-$series"
  mkdir -p "$out"
  clang -O2 -g -Wall -Werror -target bpf -I "/usr/include/$(uname -m)-linux-gnu" -c "$HERE/probe.bpf.c" -o "$out/probe.bpf.o"
  clang -O2 -Wall -Werror -o "$out/kpr-sctp-peer" "$REPO/sandbox/sctp-peer.c"
  cp "$0" "$out/probe.sh"
  bash "$REPO/test/kernels/vm.sh" run "$series" "$out" "bash $out/probe.sh guest $out" || true
  grep -v '^\[' "$out/console.log" | sed -n '/^kernel /,$p'
  exit 0
fi

D="${2:?}"
echo "kernel $(uname -r)"
modprobe sctp 2>/dev/null && echo "modprobe sctp: ok" || echo "modprobe sctp: failed (an SCTP socket may still load it on demand)"
CG="$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)/kpr-sctp-probe-$$"
P=/sys/fs/bpf/kpr-sctp-probe-$$
NS=kpr-sctp-probe-$$ # a network namespace of its own: the host's is never touched
HOOKS="c4:connect4 s4:sendmsg4 r4:recvmsg4 g4:getpeername4 c6:connect6 s6:sendmsg6 r6:recvmsg6 g6:getpeername6"
mkdir -p "$CG" "$P"
cleanup() {
  [ -n "${SRV:-}" ] && kill "$SRV" 2>/dev/null || true
  for x in $HOOKS; do bpftool cgroup detach "$CG" "${x#*:}" pinned "$P/${x%%:*}" 2>/dev/null || true; done
  rm -rf "$P"; rmdir "$CG" 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT
bpftool prog loadall "$D/probe.bpf.o" "$P" pinmaps "$P/maps"
for x in $HOOKS; do bpftool cgroup attach "$CG" "${x#*:}" pinned "$P/${x%%:*}" multi; done
ip netns add "$NS"
ip -n "$NS" link set lo up
nsenter --net="/run/netns/$NS" "$D/kpr-sctp-peer" serve 9000 probe-server & SRV=$!
sleep 1
# nsenter, not ip netns exec: that remounts /sys, which would hide the cgroup.
incg() { sh -c 'cg=$0; ns=$1; shift; echo $$ > "$cg/cgroup.procs"; exec nsenter --net="$ns" "$@"' "$CG" "/run/netns/$NS" "$@"; }
for target in 198.18.0.1 127.0.0.1 ::1; do
  for mode in stream seqpacket; do
    echo "== $mode to $target:9000"
    incg "$D/kpr-sctp-peer" dial "$mode" "$target" 9000 2 3000 || echo "(exit $?)"
  done
done
echo "== SCTP calls per hook: connect4 sendmsg4 recvmsg4 getpeername4 connect6 sendmsg6 recvmsg6 getpeername6"
for i in 0 1 2 3 4 5 6 7; do bpftool map lookup pinned "$P/maps/hits" key $i 0 0 0 -j | tr -d ' \n' | sed 's/.*"value":\([0-9]*\).*/\1/'; printf ' '; done; echo
