/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Key/value layouts of every kpr map. This is the single C source of truth;
 * agent/maps/registry.ts mirrors its structs (each map's key and value layout,
 * from which the codecs of agent/maps/layout.ts are derived) and layout.ts its
 * enums and flags; test/bpf/layout.test.ts checks both against the BTF and
 * constants of the compiled objects, so the two sides cannot drift silently.
 * Padding is explicit: keys are hashed byte for byte, so stray padding would
 * make two logically equal keys different.
 *
 * Addresses are 16 bytes for both families; IPv4 is stored IPv4-mapped
 * (::ffff:a.b.c.d). One set of maps then serves IPv4, IPv6 and IPv4-mapped
 * IPv6 sockets, and the agent has one codec per struct instead of two.
 */
#ifndef __KPR_TYPES_H
#define __KPR_TYPES_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/*
 * Service map. One frontend (address, port, protocol, scope) owns slots
 * 0..count: slot 0 is the master entry and slots 1..count each name one
 * backend. Readers take the count from slot 0 first, so the agent writes
 * backend slots before raising the count and removes them only after lowering
 * it: a reader never sees a slot that is not there.
 */
struct kpr_svc_key {
	__be32 addr[4];
	__be16 port;
	__u16 slot;
	__u8 proto;   /* IPPROTO_TCP / IPPROTO_UDP / IPPROTO_SCTP */
	__u8 scope;   /* KPR_SCOPE_*: which callers this entry serves */
	__u8 pad[2];
};

/*
 * Slot 0 is the frontend's header, slots 1..count its backends: the same 12
 * bytes read two ways. The first word is a union, so neither reading borrows
 * the other's name (slot 0 once kept the affinity timeout in backend_id);
 * count, flags and frontend_id are the header's only. The selection algorithm
 * (enum kpr_svc_alg) lives in the spare top bits of flags rather than in a
 * field of its own: the value's layout is what pinned maps of a running
 * agent hold (live upgrades read it in place) and what test/bpf/layout.test.ts
 * compares with agent/maps/registry.ts. Read it with kpr_svc_algorithm().
 */
struct kpr_svc_val {
	union {
		__u32 backend_id;         /* slot > 0: id in the backend map */
		__u32 affinity_timeout_s; /* slot 0: ClientIP affinity timeout (with KPR_SVC_F_AFFINITY) */
	};
	__u16 count;      /* slot 0: number of backend slots */
	__u16 flags;      /* slot 0: KPR_SVC_F_* in bits 0-11, the kpr_svc_alg in bits 12-15 */
	__u32 frontend_id; /* slot 0: frontend id, for reverse NAT and affinity */
};

/*
 * A frontend has one entry set per scope. EXTERNAL is what traffic from
 * outside the node gets (and everyone, when no INTERNAL set exists); INTERNAL
 * is written only when callers on the node must see a different backend set
 * (externalTrafficPolicy=Local keeps in-node callers on cluster endpoints).
 */
enum kpr_scope {
	KPR_SCOPE_EXTERNAL = 0,
	KPR_SCOPE_INTERNAL = 1,
};

enum kpr_svc_flags {
	KPR_SVC_F_CLUSTER_IP = 1 << 0,
	KPR_SVC_F_NODE_PORT = 1 << 1,
	KPR_SVC_F_EXTERNAL_IP = 1 << 2,
	KPR_SVC_F_LOAD_BALANCER = 1 << 3,
	KPR_SVC_F_AFFINITY = 1 << 4,      /* ClientIP affinity: slot 0's affinity_timeout_s */
	KPR_SVC_F_LOCAL_ONLY = 1 << 5,    /* eTP=Local: tc keeps the client address (no SNAT) */
	KPR_SVC_F_SOURCE_RANGES = 1 << 6, /* check kpr_src_range */
	/*
	 * One of the frontend's backends (either scope) runs on this node, so a
	 * pod calling it may land on itself: hairpin, masqueraded (kpr_masq.h).
	 */
	KPR_SVC_F_LOCAL_BACKEND = 1 << 7,
};

/*
 * How a new connection picks one of the frontend's backends, when affinity
 * does not decide (kpr_lb_select.h). Bits 12-15 of slot 0's flags; the
 * agent writes it for every frontend (agent/maps/layout.ts, SVC_ALG).
 * A value this build does not know selects at random, like RANDOM.
 */
enum kpr_svc_alg {
	KPR_SVC_ALG_RANDOM = 0, /* uniform over slots 1..count, as kube-proxy's statistic-mode rules */
	KPR_SVC_ALG_MAGLEV = 1, /* the flow's hash into the frontend's Maglev table (kpr_maglev_ref, kpr_maglev) */
};

#define KPR_SVC_ALG_SHIFT 12
#define KPR_SVC_ALG_MASK 0xf

/*
 * Maglev lookup tables (kpr_lb_select.h). A table is M entries (M prime,
 * chosen by the agent: agent/lb/prime.ts), each the slot number 1..count of
 * the frontend's backend it names, so a flow picks kpr_svc slot
 * table[hash % M] as random selection picks a slot, and the rest of the
 * pipeline (kpr_lb_select_other, affinity, conntrack) stays slot-based.
 * Tables are shared: frontends whose entry sets name the same backends in
 * the same slots (a Service's ClusterIP, NodePort and load-balancer
 * frontends of one port) point at one table id. A table is stored in
 * chunks of KPR_MAGLEV_CHUNK entries, one hash element each, keyed by
 * (table id, chunk index): a table of M entries takes ceil(M / 1024)
 * elements, so memory follows M (2 KiB at the default M=1021 of up to 3
 * backends, 32 KiB at Cilium's 16381) instead of a fixed stride.
 */
#define KPR_MAGLEV_CHUNK_SHIFT 10
#define KPR_MAGLEV_CHUNK (1 << KPR_MAGLEV_CHUNK_SHIFT)

struct kpr_maglev_key {
	__u32 table_id;
	__u32 chunk; /* entries chunk*KPR_MAGLEV_CHUNK .. +KPR_MAGLEV_CHUNK-1 */
};

struct kpr_maglev_chunk {
	__u16 slots[KPR_MAGLEV_CHUNK]; /* slot number 1..count; 0 past M */
};

/* Which table an entry set (frontend id, scope) uses. */
struct kpr_maglev_ref_key {
	__u32 frontend_id;
	__u8 scope;
	__u8 pad[3];
};

struct kpr_maglev_ref {
	__u32 table_id;
	__u32 m; /* the table's size: a prime, at most 65521 */
};

struct kpr_backend {
	__be32 addr[4];
	__be16 port;
	__u8 proto;
	__u8 flags; /* KPR_BE_F_* */
};

enum kpr_backend_flags {
	KPR_BE_F_LOCAL = 1 << 0, /* the endpoint runs on this node */
};

/*
 * Addresses kpr serves (ClusterIPs and the like). A connect to such an
 * address on a port no Service defines is refused at once, as kube-proxy's
 * nftables mode does, instead of leaking towards the network.
 */
struct kpr_vip_key {
	__be32 addr[4];
};

struct kpr_vip_val {
	__u32 flags; /* KPR_VIP_F_* */
};

enum kpr_vip_flags {
	KPR_VIP_F_REFUSE_UNKNOWN_PORT = 1 << 0,
};

/*
 * Reverse NAT for the socket path: which frontend a socket really called, so
 * recvmsg/getpeername show the service address instead of the backend. Keyed
 * by the socket cookie so two sockets talking to the same backend through
 * different services each see their own frontend.
 */
struct kpr_revnat_key {
	__u64 cookie;
	__be32 addr[4];
	__be16 port;
	__u8 pad[6];
};

struct kpr_revnat_val {
	__be32 addr[4];
	__be16 port;
	__u8 pad[2];
	__u32 frontend_id;
};

/*
 * Session affinity (sessionAffinity: ClientIP). The socket path knows no
 * client address at connect time, so it keys by network namespace cookie
 * (a pod, or the host); the tc path keys by client address with cookie 0.
 */
struct kpr_affinity_key {
	__u64 netns_cookie;
	__be32 client[4];
	__u32 frontend_id;
	__u8 pad[4];
};

struct kpr_affinity_val {
	__u64 last_used_ns; /* bpf_ktime_get_ns() of the last connection */
	__u32 backend_id;
	__u8 pad[4];
};

/*
 * (backend, frontend) pairs that are currently valid, for frontends with
 * affinity: an affinity entry naming a backend that left the service is
 * ignored, so the client is re-balanced at once.
 */
struct kpr_affinity_match_key {
	__u32 backend_id;
	__u32 frontend_id;
};

/*
 * (backend, frontend) pairs whose connected UDP sockets must be destroyed:
 * the backend left that frontend (written by the agent, consumed by the
 * socket iterator in kpr_sock_term.bpf.c). Keyed by frontend too, because the
 * same backend may still serve another Service.
 */
struct kpr_term_key {
	__be32 addr[4];
	__be16 port;
	__u8 proto;
	__u8 pad;
	__u32 frontend_id;
};

/*
 * What a frontend id stands for, so `kpr` can name services from the kernel's
 * state alone. No program reads it; it is pinned with the other maps. The
 * fields hold Kubernetes' longest names whole (layout v2; v1 had 96 and 32
 * bytes, and two Services whose names differ past those read as one).
 */
struct kpr_svc_meta {
	char name[128];     /* "namespace/name": 63 + 1 + 63 bytes and the NUL */
	char port_name[64]; /* a DNS label: 63 bytes and the NUL */
	__u8 type;          /* KPR_FE_* */
	__u8 proto;         /* IPPROTO_*; 0 from agents before it was added */
	__u8 pad[2];
};

enum kpr_frontend_type {
	KPR_FE_CLUSTER_IP = 0,
	KPR_FE_NODE_PORT = 1,
	KPR_FE_LOAD_BALANCER = 2,
	KPR_FE_EXTERNAL_IP = 3,
};

/*
 * Connection tracking for the tc path (traffic that arrives from the network,
 * and pod traffic in service-mesh mode). Each NATed flow has two entries: the
 * ORIGINAL one keyed by the packet as the client sent it, and the REPLY one
 * keyed by the packet as the backend answers. Each holds the rewrite to apply.
 */
struct kpr_ct_key {
	__be32 saddr[4];
	__be32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 dir; /* KPR_CT_DIR_* */
	__u8 pad[2];
};

struct kpr_ct_val {
	__be32 nat_saddr[4];
	__be32 nat_daddr[4];
	__be16 nat_sport;
	__be16 nat_dport;
	__u32 backend_id;  /* ORIGINAL: the backend chosen, re-checked on use */
	__u64 expires_ns;  /* bpf_ktime_get_ns() deadline; the agent sweeps expired ones */
	__u8 pad0[2];      /* layout v1's 16-bit frontend_id: flags stay where v1 had them (kpr_migrate.h) */
	__u8 flags;        /* KPR_CT_F_* */
	__u8 pad1;
	__u32 frontend_id;
};

enum kpr_ct_dir {
	KPR_CT_DIR_ORIGINAL = 0,
	KPR_CT_DIR_REPLY = 1,
};

enum kpr_ct_flags {
	KPR_CT_F_SNAT = 1 << 0,    /* the source was rewritten to a node address */
	KPR_CT_F_CLOSING = 1 << 1, /* FIN or RST seen: short timeout */
	KPR_CT_F_ANSWERED = 1 << 2, /* REPLY entries: the backend's SYN-ACK passed (kpr_ct_unanswered) */
};

/*
 * loadBalancerSourceRanges: an LPM trie keyed by frontend id then client
 * address, so one lookup answers "may this client call this frontend".
 * prefixlen counts the bits after itself: 32 for frontend_id (layout v1: a
 * 16-bit id and 16 bits of padding, the same 32), plus the address prefix
 * (96 + n for an IPv4 /n, stored IPv4-mapped).
 */
struct kpr_src_range_key {
	__u32 prefixlen;
	__u32 frontend_id;
	__be32 addr[4];
};

/*
 * The cluster's service ranges (ServiceCIDR objects, or --service-cluster-ip-range
 * where the API has none): an LPM trie of addresses alone, IPv4 stored
 * IPv4-mapped, so prefixlen is 96 + n for an IPv4 /n and n for an IPv6 /n.
 * An address inside a range that no Service holds is "unallocated"
 * (kpr_svc_cidr.h).
 */
struct kpr_svc_cidr_key {
	__u32 prefixlen;
	__be32 addr[4];
};

/* Node-wide settings the agent writes once at start (one-entry array). */
struct kpr_config {
	__u64 host_netns_cookie; /* the node's own network namespace */
	__be32 snat_v4[4];       /* node address used for SNAT, IPv4-mapped */
	__be32 snat_v6[4];
	__u32 tcp_timeout_s;
	__u32 tcp_closing_timeout_s;
	__u32 udp_timeout_s;
	__u32 flags; /* KPR_CFG_F_* */
};

enum kpr_config_flags {
	/* Socket hooks serve only the node's own processes (service-mesh mode). */
	KPR_CFG_F_SOCK_HOST_ONLY = 1 << 0,
	/* No per-frontend counters (kpr_svc_stats): the agent's --service-counters=false. */
	KPR_CFG_F_NO_SVC_STATS = 1 << 1,
	/* A live migration is under way: a state-map miss reads the old map too (kpr_migrate.h). */
	KPR_CFG_F_MIGRATING = 1 << 2,
	/*
	 * Pods' traffic is masqueraded where kube-proxy masquerades it: external
	 * addresses of eTP=Cluster Services, and hairpin (kpr_masq.h). The agent's
	 * --masquerade-pod-traffic; set only when host_netns_cookie is known.
	 */
	KPR_CFG_F_MASQ_POD = 1 << 3,
	/*
	 * The agent added the SNAT port range (enum kpr_snat_ports) to the node's
	 * net.ipv4.ip_local_reserved_ports, so `kpr cleanup` takes it out again.
	 * No program reads it: the pinned map is where it outlives the agent.
	 */
	KPR_CFG_F_SNAT_PORTS_RESERVED = 1 << 4,
};

/*
 * The source ports the tc path SNATs to (kpr_snat.h; docs/semantics.md,
 * rule 37), both ends included. The agent reserves them from the node's
 * ephemeral ports (net.ipv4.ip_local_reserved_ports), so the node's own
 * connections never pick one: 61000 is just above Linux's default
 * ip_local_port_range (32768-60999).
 */
enum kpr_snat_ports {
	KPR_SNAT_PORT_MIN = 61000,
	KPR_SNAT_PORT_MAX = 65535,
};

/*
 * What happened to the new connections (socket path) and new flows (tc
 * path) of one frontend, per CPU, in kpr_svc_stats at its frontend_id. Only
 * decisions are counted, never packets of known flows, so the cost is one
 * lookup per connection and none per packet.
 */
struct kpr_svc_stat {
	__u64 balanced;                  /* sent to a backend */
	__u64 refused;                   /* socket path: no endpoint, the call fails with EPERM */
	__u64 dropped_no_endpoint;       /* tc path: no endpoint */
	__u64 dropped_no_local_endpoint; /* tc path: traffic policy Local, none on this node */
	__u64 dropped_source_range;      /* tc path: client outside loadBalancerSourceRanges */
};

/* Datapath counters, one slot of the per-CPU stats array each. */
enum kpr_stat {
	KPR_STAT_CONNECT_XLATE = 0,
	KPR_STAT_SENDMSG_XLATE = 1,
	KPR_STAT_RECVMSG_XLATE = 2,
	KPR_STAT_GETPEERNAME_XLATE = 3,
	KPR_STAT_NO_BACKEND = 4,
	KPR_STAT_BACKEND_MISSING = 5,
	KPR_STAT_UNKNOWN_PORT = 6,
	KPR_STAT_AFFINITY_HIT = 7,
	KPR_STAT_SOCK_DESTROYED = 8,
	KPR_STAT_TC_DNAT = 9,            /* new flows NATed on the tc path */
	KPR_STAT_TC_FWD = 10,            /* packets of known flows rewritten */
	KPR_STAT_TC_REVNAT = 11,         /* reply packets reverse-NATed */
	KPR_STAT_TC_DROP_NO_BACKEND = 12,
	KPR_STAT_TC_DROP_SOURCE_RANGE = 13,
	KPR_STAT_TC_DROP_NO_SNAT_PORT = 14,
	KPR_STAT_TC_PASS_MALFORMED = 15, /* truncated, fragmented, options we do not parse */
	/*
	 * A TCP packet without SYN to a frontend, with no conntrack entry: the
	 * middle of a flow kpr_ct no longer holds (evicted from the full LRU map,
	 * or expired while idle). It is balanced as a new flow, so it may reach
	 * another backend and be reset: the sign the map is too small.
	 */
	KPR_STAT_TC_CT_LOST = 16,
	/* kpr monitor was on but its ring buffer (kpr_events) was full: the event was not recorded. */
	KPR_STAT_MONITOR_LOST = 17,
	/*
	 * A live flow's REPLY entry put back from its ORIGINAL entry on a client
	 * packet: it had been evicted (the LRU map evicts entries, not flows) or
	 * had expired while only the client sent. Without it the backend's
	 * answers would miss conntrack and be reset by the node's stack.
	 */
	KPR_STAT_TC_CT_REPLY_RESTORED = 18,
	/* Socket path: a connect/sendmsg to an unallocated address of a service range, refused (kpr_svc_cidr.h). */
	KPR_STAT_UNALLOCATED_REFUSED = 19,
	/* tc path: a new flow to an unallocated address of a service range, dropped (kpr_svc_cidr.h). */
	KPR_STAT_TC_DROP_UNALLOCATED = 20,
	/*
	 * SNAT port candidates skipped (kpr_snat.h), each once: a socket of the
	 * node holds the port towards the backend (a collision avoided), or
	 * another kpr flow does; and new flows for which every candidate was
	 * taken (they keep the client's port if nothing holds it, else they are
	 * dropped and counted in KPR_STAT_TC_DROP_NO_SNAT_PORT too).
	 */
	KPR_STAT_TC_SNAT_SKIP_NODE_SOCKET = 21,
	KPR_STAT_TC_SNAT_SKIP_CONNTRACK = 22,
	KPR_STAT_TC_SNAT_EXHAUSTED = 23,
	/* Masquerade (kpr_masq.h): pod connections the socket hooks left untranslated for tc to DNAT and SNAT. */
	KPR_STAT_SOCK_MASQ_DIVERT = 24,
	/* Masquerade: new pod flows tc SNATed to the node (external address of an eTP=Cluster Service, or hairpin). */
	KPR_STAT_TC_MASQ_SNAT = 25,
	/*
	 * tc path: a new SCTP flow to a frontend, dropped. SCTP's CRC32c covers
	 * the ports, and tc cannot tell a packet whose CRC is still to be filled
	 * in (CHECKSUM_PARTIAL, as a pod's packets cross a veth) from one that
	 * carries it, so kpr does not rewrite SCTP (docs/semantics.md rule 39).
	 */
	KPR_STAT_TC_DROP_SCTP = 26,
	/*
	 * A Maglev frontend whose table, table reference or table entry was
	 * missing or out of range (a race with the agent, which writes the
	 * table before it points a frontend at it): selected at random.
	 */
	KPR_STAT_MAGLEV_FALLBACK = 27,
	/*
	 * The socket path, Maglev frontend, the connecting socket's source port
	 * not yet known (an unbound socket's connect): selected at random.
	 */
	KPR_STAT_MAGLEV_SOCK_UNBOUND = 28,
	/*
	 * tc path: a SYN retrying a connect its client had reset before the
	 * backend answered it (kpr_ct_unanswered): kept on the flow's backend and
	 * SNAT port instead of balanced afresh. Each is a TIME_WAIT connection on
	 * the backend that the SNAT port met and the client's reset cleared.
	 */
	KPR_STAT_TC_SYN_RETRY_KEPT = 29,
	KPR_STAT_MAX = 32,
};

#endif /* __KPR_TYPES_H */
