#!/bin/bash
# Second stage of the kernel-matrix guest (runs from the host's root over
# 9p): the mounts a test expects, a modprobe for the guest kernel's modules,
# then the command in OUT/cmd; its exit code goes to OUT/rc.
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^$1=//p" | tail -1; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
# kpr.bpffs=0 (KPR_VM_BPFFS=0): no bpffs, as on a node that does not mount it at boot.
[ "$(arg kpr.bpffs)" = 0 ] || mount -t bpf bpffs /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
ver="$(arg kpr.ver)"; mods="$(arg kpr.mods)"; out="$(arg kpr.out)"; work="$(arg kpr.work)"
cat > /run/kpr-modprobe <<EOM
#!/bin/sh
exec /sbin/modprobe -d $mods -S $ver "\$@"
EOM
chmod +x /run/kpr-modprobe
echo /run/kpr-modprobe > /proc/sys/kernel/modprobe
for m in veth bridge sch_ingress cls_bpf act_bpf nf_tables nft_compat nf_conntrack inet_diag tcp_diag udp_diag; do
  /run/kpr-modprobe -q "$m" 2>/dev/null
done
ip link set lo up
hostname kpr-vm
# Emulated CPUs are several times slower: the sandbox waits that much longer.
# The checkout's Node LTS (build/node, Makefile) first: the guests run what the host's tests run.
export PATH=$work/build/node/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root KPR_IN_VM=1 KPR_TEST_TIME_SCALE=6
ulimit -l unlimited
echo "kpr guest: kernel $(uname -r), running: $(cat "$out/cmd")"
cd "$work"
bash "$out/cmd"
rc=$?
echo "$rc" > "$out/rc"
sync
echo "kpr guest: done, rc=$rc"
echo o > /proc/sysrq-trigger
sleep 10
