/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Key/value layouts of every kpr map. This is the single C source of truth;
 * agent/maps/layout.ts mirrors it and test/bpf/layout.test.ts checks the mirror
 * against the BTF of the compiled object, so the two cannot drift silently.
 * Padding is explicit: keys are hashed byte-for-byte, so stray padding would
 * make two logically equal keys different.
 */
#ifndef __KPR_TYPES_H
#define __KPR_TYPES_H

#include <linux/types.h>

/*
 * Service map. One frontend (address, port, protocol) owns slots 0..count:
 * slot 0 is the master entry (count, rev_nat_id, flags) and slots 1..count
 * each name one backend. Readers take the count from slot 0 first, so the
 * agent writes backend slots before raising the count and removes them only
 * after lowering it: a reader never sees a slot that is not there.
 */
struct kpr_svc4_key {
	__be32 addr;
	__be16 port;
	__u16 slot;
	__u8 proto;   /* IPPROTO_TCP / IPPROTO_UDP */
	__u8 scope;   /* KPR_SCOPE_*: which traffic this frontend entry serves */
	__u8 pad[2];
};

struct kpr_svc4_val {
	__u32 backend_id; /* slot > 0: id in the backend map */
	__u16 count;      /* slot 0: number of backend slots */
	__u16 rev_nat_id; /* slot 0: service id, used for reverse NAT */
	__u8 flags;       /* slot 0: KPR_SVC_F_* */
	__u8 pad[3];
};

enum kpr_scope {
	KPR_SCOPE_EXTERNAL = 0,
	KPR_SCOPE_INTERNAL = 1,
};

enum kpr_svc_flags {
	KPR_SVC_F_CLUSTER_IP = 1 << 0,
};

struct kpr_backend4 {
	__be32 addr;
	__be16 port;
	__u8 proto;
	__u8 flags;
};

/*
 * Reverse NAT for the socket path: which frontend a socket really called, so
 * recvmsg/getpeername can show the ClusterIP instead of the backend. Keyed by
 * the socket cookie so two sockets talking to the same backend through
 * different services each see their own frontend.
 */
struct kpr_revnat4_key {
	__u64 cookie;
	__be32 addr;
	__be16 port;
	__u16 pad;
};

struct kpr_revnat4_val {
	__be32 addr;
	__be16 port;
	__u16 rev_nat_id;
};

/* Datapath counters, one slot of the per-CPU stats array each. */
enum kpr_stat {
	KPR_STAT_CONNECT4_XLATE = 0,
	KPR_STAT_SENDMSG4_XLATE = 1,
	KPR_STAT_RECVMSG4_XLATE = 2,
	KPR_STAT_GETPEERNAME4_XLATE = 3,
	KPR_STAT_NO_BACKEND = 4,
	KPR_STAT_BACKEND_MISSING = 5,
	KPR_STAT_MAX = 32,
};

#endif /* __KPR_TYPES_H */
