#!/usr/bin/env bash
# Boots a Debian kernel under QEMU (TCG) with this machine's root filesystem
# shared read-only over 9p and runs one command inside it as root.
#
#   test/kernels/vm.sh fetch SERIES          # 5.10 | 6.1 | 6.12: download + unpack
#   test/kernels/vm.sh run SERIES OUTDIR CMD  # boot, run CMD (bash -c), power off
#
# Inside the guest: tmpfs on /tmp /run /var/tmp /root, bpffs (unless
# KPR_VM_BPFFS=0: a node whose /sys/fs/bpf is not mounted), cgroup2 at
# /sys/fs/cgroup, lo up, and a modprobe that loads the guest kernel's own
# modules. OUTDIR (host path) is shared read-write at the same path, and the
# checkout (KPR_VM_WORKDIR, default the repo) read-only with cache=loose: the
# tests write only to OUTDIR and tmpfs, and an uncached 9p mount made every
# module Node resolves a round trip to the host (a CLI command took 65 s on
# 5.10). Do not rebuild the checkout while a guest runs. CMD's exit code lands
# in OUTDIR/rc and its output in OUTDIR/console.log (with the kernel's).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${KPR_KERNEL_CACHE:-$REPO/build/kernels}"
MEM="${KPR_VM_MEM:-3G}"
SMP="${KPR_VM_SMP:-2}"
# A whole leg took 1,967 s on 5.10 with the host loaded (two CPUs shared with a make test).
TIMEOUT="${KPR_VM_TIMEOUT:-3600}"

# Debian suite and package name pattern per kernel series (generic flavour:
# the cloud flavour has no 9p).
suite_of() {
  case "$1" in
    5.10) echo bullseye ;;
    6.1) echo bookworm ;;
    6.12) echo trixie ;;
    *) echo "kpr vm: unknown kernel series '$1' (5.10, 6.1, 6.12)" >&2; return 2 ;;
  esac
}
pattern_of() {
  case "$1" in
    5.10) echo '^linux-image-5\.10\.0-[0-9]+-amd64-unsigned$' ;;
    6.1) echo '^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' ;;
    6.12) echo '^linux-image-6\.12\.[0-9]+\+deb13(\.[0-9]+)?-amd64-unsigned$' ;;
  esac
}

host_deps() {
  local missing=""
  for p in qemu-system-x86 busybox-static kmod cpio xz-utils; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    echo "kpr vm: installing Debian packages:$missing" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
}

apt_opts() {
  echo "-o Dir::Etc::sourcelist=$CACHE/apt/sources.list -o Dir::Etc::sourceparts=- -o Dir::State::Lists=$CACHE/apt/lists -o Dir::Cache::Archives=$CACHE/apt/archives -o Dir::State::status=/var/lib/dpkg/status -o APT::Sandbox::User=root"
}

apt_update() {
  mkdir -p "$CACHE/apt/lists/partial" "$CACHE/apt/archives/partial"
  local key=/usr/share/keyrings/debian-archive-keyring.gpg
  {
    for s in bullseye bookworm trixie; do
      echo "deb [signed-by=$key] http://deb.debian.org/debian $s main"
      echo "deb [signed-by=$key] http://deb.debian.org/debian-security $s-security main"
    done
  } > "$CACHE/apt/sources.list"
  # One update per day at most: the lists name the newest kernel of each suite.
  if [ -z "$(find "$CACHE/apt/lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
    apt-get $(apt_opts) update -qq >&2
  fi
}

# Prints the kernel directory (CACHE/SERIES) after making sure it is unpacked.
fetch() {
  local series="$1" dir="$CACHE/$1"
  suite_of "$series" >/dev/null
  if [ -f "$dir/ready" ]; then
    [ "$dir/initramfs.gz" -nt "$HERE/initramfs-init" ] || build_initramfs "$dir" "$(cat "$dir/version")"
    echo "$dir"; return
  fi
  host_deps
  apt_update
  local pkg
  pkg="$(apt-cache $(apt_opts) search --names-only "$(pattern_of "$series")" | awk '{print $1}' | sort -V | tail -1)"
  [ -n "$pkg" ] || { echo "kpr vm: no kernel package for $series" >&2; return 1; }
  echo "kpr vm: $series → $pkg" >&2
  rm -rf "$dir"; mkdir -p "$dir/root"
  (cd "$CACHE/apt/archives" && apt-get $(apt_opts) download "$pkg" >&2)
  dpkg-deb -x "$(ls -t "$CACHE/apt/archives/${pkg}"_*.deb | head -1)" "$dir/root"
  # trixie ships modules under usr/lib/modules; give both layouts one path.
  local modroot="$dir/root/lib/modules"
  [ -d "$modroot" ] || modroot="$dir/root/usr/lib/modules"
  local ver; ver="$(ls "$modroot" | head -1)"
  mkdir -p "$dir/mods/lib/modules"
  # Relative, so the cache still works when reached by another path (a worktree's symlink, a moved checkout).
  ln -sfn "$(realpath --relative-to="$dir/mods/lib/modules" "$modroot/$ver")" "$dir/mods/lib/modules/$ver"
  depmod -b "$dir/mods" "$ver"
  echo "$ver" > "$dir/version"
  cp "$dir/root/boot/vmlinuz-$ver" "$dir/vmlinuz"
  build_initramfs "$dir" "$ver"
  touch "$dir/ready"
  echo "$dir"
}

build_initramfs() {
  local dir="$1" ver="$2" ir="$1/initramfs"
  rm -rf "$ir"; mkdir -p "$ir"/{bin,dev,proc,sys,newroot,mods}
  cp /bin/busybox "$ir/bin/busybox"
  for m in virtio_pci virtio_blk 9p 9pnet_virtio; do
    modprobe -d "$dir/mods" -S "$ver" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}'
  done | awk '!seen[$0]++' > "$ir/mods/order.host"
  : > "$ir/mods/order"
  while read -r ko; do
    local base; base="$(basename "$ko")"
    case "$base" in
      *.xz) xz -dc "$ko" > "$ir/mods/${base%.xz}"; base="${base%.xz}" ;;
      *.zst) zstd -qdc "$ko" > "$ir/mods/${base%.zst}"; base="${base%.zst}" ;;
      *) cp "$ko" "$ir/mods/$base" ;;
    esac
    echo "$base" >> "$ir/mods/order"
  done < "$ir/mods/order.host"
  rm "$ir/mods/order.host"
  cp "$HERE/initramfs-init" "$ir/init"; chmod +x "$ir/init"
  (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$dir/initramfs.gz"
}

run() {
  local series="$1" out="$2"; shift 2
  local dir; dir="$(fetch "$series")"
  local ver; ver="$(cat "$dir/version")"
  host_deps
  mkdir -p "$out"; out="$(cd "$out" && pwd)"
  rm -f "$out/rc" "$out/console.log"
  local work="${KPR_VM_WORKDIR:-$REPO}"
  printf '%s\n' "$*" > "$out/cmd"
  # The guest's modprobe: the guest kernel's own modules from the shared tree.
  local cmdline="console=ttyS0 panic=-1 quiet loglevel=3 kpr.ver=$ver kpr.mods=$dir/mods kpr.out=$out kpr.work=$work kpr.init=$HERE/guest-init.sh kpr.bpffs=${KPR_VM_BPFFS:-1}"
  set +e
  timeout --foreground -k 10 "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max -smp "$SMP" -m "$MEM" \
    -nographic -no-reboot -monitor none -serial stdio \
    -kernel "$dir/vmlinuz" -initrd "$dir/initramfs.gz" -append "$cmdline" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs local,path="$work",mount_tag=work,security_model=none,multidevs=remap \
    -virtfs local,path="$out",mount_tag=out,security_model=none,multidevs=remap \
    -nic none > "$out/console.log" 2>&1 < /dev/null
  local q=$?
  set -e
  if [ ! -f "$out/rc" ]; then
    echo "kpr vm: $series ($ver): the guest did not finish (qemu exit $q); see $out/console.log" >&2
    tail -30 "$out/console.log" >&2
    return 3
  fi
  return "$(cat "$out/rc")"
}

case "${1:-}" in
  fetch) fetch "$2" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 fetch SERIES | run SERIES OUTDIR CMD..." >&2; exit 2 ;;
esac
