/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Layouts of `kpr monitor`'s two maps: the switch (kpr_monitor) and the
 * records of the ring buffer (kpr_events). Mirrored in
 * agent/maps/registry.ts (MONITOR, EVENT), checked against BTF by
 * test/bpf/layout.test.ts; the emit helper is kpr_monitor.h's.
 */
#ifndef __KPR_EVENT_H
#define __KPR_EVENT_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/*
 * The switch, one entry shared by every object (a pinned map, since .bss is
 * per object). Events are emitted while bpf_ktime_get_ns() < until_ns: the
 * reader sets a deadline a few seconds ahead and renews it while it runs, so
 * a reader that dies leaves the datapath paying for nothing once it lapses.
 */
struct kpr_monitor {
	__u64 until_ns; /* 0: off */
};

/*
 * One decision of the datapath: a new connection or datagram on the socket
 * path, a new flow on the tc path. Packets of known flows and reverse
 * translations make none (as kpr_svc_stats counts only decisions).
 * Addresses are 16 bytes, IPv4-mapped for IPv4, as in every kpr map.
 */
struct kpr_event {
	__u64 ts_ns;          /* bpf_ktime_get_ns() */
	__u64 cookie;         /* socket path: the socket's cookie; tc: 0 */
	__u64 netns_cookie;   /* socket path: the caller's network namespace; tc: 0 */
	__be32 client[4];     /* tc: the packet's source; socket path: zero (unknown at connect) */
	__be32 frontend[4];   /* the address called */
	__be32 backend[4];    /* what it was translated to (KPR_EV_TRANSLATED, KPR_EV_NO_SNAT_PORT) */
	__be16 client_port;
	__be16 frontend_port;
	__be16 backend_port;
	__u8 type;            /* KPR_EV_* */
	__u8 hook;            /* KPR_HOOK_* */
	__u32 frontend_id;    /* the frontend's id, kpr_svc_val.frontend_id (0 for KPR_EV_UNKNOWN_PORT) */
	__u32 backend_id;     /* kpr_backend id, 0 when none was chosen */
	__u8 proto;           /* IPPROTO_TCP / IPPROTO_UDP / IPPROTO_SCTP */
	__u8 family;          /* AF_INET / AF_INET6 of the socket or packet */
	__u8 scope;           /* KPR_SCOPE_* of the entry set found */
	__u8 flags;           /* KPR_EVF_* */
	__u8 pad[4];
};

enum kpr_event_type {
	KPR_EV_TRANSLATED = 1,        /* sent to a backend */
	KPR_EV_NO_ENDPOINT = 2,       /* frontend without backends: socket refused, tc dropped */
	KPR_EV_NO_LOCAL_ENDPOINT = 3, /* tc: traffic policy Local, no backend on this node: dropped */
	KPR_EV_UNKNOWN_PORT = 4,      /* socket: a service address on a port no Service defines: refused */
	KPR_EV_SOURCE_RANGE = 5,      /* tc: client outside loadBalancerSourceRanges: dropped */
	KPR_EV_BACKEND_MISSING = 6,   /* the chosen slot or backend vanished (agent mid-write): passed untranslated */
	KPR_EV_NO_SNAT_PORT = 7,      /* tc: no free SNAT port towards the backend: dropped */
	KPR_EV_UNALLOCATED = 8,       /* an address of a service range no Service holds: socket refused, tc dropped */
	KPR_EV_MASQ_DIVERT = 10,      /* socket: a pod's connection left untranslated, for tc to masquerade (kpr_masq.h) */
	KPR_EV_SCTP_UNSUPPORTED = 11, /* tc: a new SCTP flow to a frontend: dropped (KPR_STAT_TC_DROP_SCTP) */
};

enum kpr_event_hook {
	KPR_HOOK_CONNECT4 = 1,
	KPR_HOOK_CONNECT6 = 2,
	KPR_HOOK_SENDMSG4 = 3,
	KPR_HOOK_SENDMSG6 = 4,
	KPR_HOOK_TC_EXT = 5, /* kpr_tc_ext: from the network */
	KPR_HOOK_TC_POD = 6, /* kpr_tc_pod: from a pod of this node */
};

enum kpr_event_flags {
	KPR_EVF_AFFINITY = 1 << 0, /* the backend came from the client's affinity entry */
	KPR_EVF_SNAT = 1 << 1,     /* tc: the source was rewritten to the node */
	KPR_EVF_CT_LOST = 1 << 2,  /* tc: a TCP packet without SYN and without conntrack entry (see KPR_STAT_TC_CT_LOST) */
};

#endif /* __KPR_EVENT_H */
