// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The tc half of kpr: traffic that arrives from the network (NodePort,
 * LoadBalancer, externalIPs, ClusterIP routed to the node) never passes a
 * socket hook, so it is DNATed per packet here, with BPF conntrack and NAT.
 *
 * Programs run at ingress only:
 *  - kpr_tc_ext on the node's external interfaces: new flows to a frontend
 *    are DNATed (and SNATed to the node unless externalTrafficPolicy=Local),
 *    replies of flows NATed here are reverse-NATed;
 *  - kpr_tc_pod on pod-facing interfaces: replies of local backends are
 *    reverse-NATed before bridging/routing, and in service-mesh mode pod
 *    traffic to a service is DNATed here instead of by the socket hooks.
 * Frontend lookup and backend choice (with ClientIP affinity by client
 * address) are kpr_lb.h's, the pipeline the socket hooks use too; this file
 * adds parsing, the drop policy (source ranges, empty sets), SNAT, conntrack
 * and the packet rewrite.
 * Every rewritten packet is forwarded with a FIB lookup and a redirect, so it
 * never meets the stack's martian-source checks or netfilter. Anything we do
 * not fully parse (fragments, IPv4 options beyond the header length we read,
 * IPv6 extension headers, truncated headers) is passed untouched.
 *
 * Other programs on the same hook (a CNI's, a network policy agent's, a
 * user's): a packet that is not kpr's gets KPR_TC_PASS, so the next program
 * runs; a packet kpr translated or dropped ends the chain at kpr
 * (docs/architecture.md, *Other tc programs on the same interface*).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <stdbool.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "kpr_types.h"
#include "kpr_maps.h"
#include "kpr_addr.h"
#include "kpr_common.h"
#include "kpr_lb.h"
#include "kpr_monitor.h"
#include "kpr_snat.h"
#include "kpr_masq.h"
#include "kpr_svc_cidr.h"

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

/*
 * The verdict for a packet kpr leaves alone: TC_ACT_UNSPEC (-1), which is
 * TCX_NEXT for a tcx program and "continue with the next filter" for a
 * cls_bpf filter in direct-action mode. The next program on the hook runs;
 * with none left the packet goes on into the stack, as with TC_ACT_OK.
 * TC_ACT_OK would end the chain: the programs after kpr (and, with tcx, every
 * classic clsact filter on the interface) would never see the packet.
 */
#define KPR_TC_PASS TC_ACT_UNSPEC

char LICENSE[] SEC("license") = "Dual BSD/GPL";

enum kpr_role {
	KPR_ROLE_EXT = 0, /* from the network */
	KPR_ROLE_POD = 1, /* from a pod on this node */
};

struct kpr_pkt {
	__be32 saddr[4];
	__be32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u8 tcp_flags; /* KPR_TCP_FIN/SYN/RST for TCP */
	__u32 l3_off;
	__u32 l4_off;
	__u32 csum_off; /* offset of the L4 checksum */
};

/*
 * SCTP's common header (RFC 9260 3.1). Parsed only so that a new SCTP flow to
 * a frontend is dropped and counted (kpr_new_flow), never rewritten: the
 * CRC32c covers the ports, and tc cannot tell a packet that carries its CRC
 * from one whose CRC is still to be filled in (CHECKSUM_PARTIAL, as a pod's
 * packets cross a veth), so no rewrite is correct for both.
 */
struct kpr_sctphdr {
	__be16 source;
	__be16 dest;
	__be32 vtag;
	__le32 checksum;
};

#define KPR_NOT_OURS 1 /* not IP, or not TCP/UDP/SCTP: nothing kpr handles */
#define KPR_MALFORMED 2 /* claims to be IP TCP/UDP/SCTP but cannot be parsed safely */

/* Returns 0 when the packet is TCP, UDP or SCTP we can read safely, KPR_NOT_OURS or KPR_MALFORMED otherwise. */
static __always_inline int kpr_parse(struct __sk_buff *skb, struct kpr_pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u32 l4_off;
	__u8 proto;

	if ((void *)(eth + 1) > data_end)
		return KPR_MALFORMED;
	p->l3_off = sizeof(*eth);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			return KPR_MALFORMED;
		if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
			return KPR_MALFORMED; /* fragments carry no ports to translate by */
		p->family = AF_INET;
		kpr_addr_from_v4(p->saddr, ip->saddr);
		kpr_addr_from_v4(p->daddr, ip->daddr);
		proto = ip->protocol;
		l4_off = p->l3_off + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			return KPR_MALFORMED;
		p->family = AF_INET6;
		kpr_addr_copy(p->saddr, ip6->saddr.in6_u.u6_addr32);
		kpr_addr_copy(p->daddr, ip6->daddr.in6_u.u6_addr32);
		proto = ip6->nexthdr; /* extension headers are not followed */
		l4_off = p->l3_off + sizeof(*ip6);
	} else {
		return KPR_NOT_OURS;
	}

	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = data + l4_off;

		if ((void *)(tcp + 1) > data_end)
			return KPR_MALFORMED;
		p->sport = tcp->source;
		p->dport = tcp->dest;
		p->tcp_flags = (tcp->fin ? KPR_TCP_FIN : 0) | (tcp->syn ? KPR_TCP_SYN : 0) | (tcp->rst ? KPR_TCP_RST : 0);
		p->csum_off = l4_off + offsetof(struct tcphdr, check);
	} else if (proto == IPPROTO_UDP) {
		struct udphdr *udp = data + l4_off;

		if ((void *)(udp + 1) > data_end)
			return KPR_MALFORMED;
		p->sport = udp->source;
		p->dport = udp->dest;
		p->tcp_flags = 0;
		p->csum_off = l4_off + offsetof(struct udphdr, check);
	} else if (proto == IPPROTO_SCTP) {
		struct kpr_sctphdr *sctp = data + l4_off;

		if ((void *)(sctp + 1) > data_end)
			return KPR_MALFORMED;
		p->sport = sctp->source;
		p->dport = sctp->dest;
		p->tcp_flags = 0;
		p->csum_off = l4_off + offsetof(struct kpr_sctphdr, checksum); /* never rewritten */
	} else {
		return KPR_NOT_OURS;
	}
	p->proto = proto;
	p->l4_off = l4_off;
	return 0;
}

/* Rewrites one address (source or destination), checksums included. */
static __always_inline int kpr_set_addr(struct __sk_buff *skb, const struct kpr_pkt *p,
					const __be32 *old, const __be32 *new, bool src)
{
	__u64 l4_flags = BPF_F_PSEUDO_HDR | (p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0);

	if (kpr_addr_eq(old, new))
		return 0;
	if (p->family == AF_INET) {
		__u32 off = p->l3_off + (src ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr));

		if (bpf_l4_csum_replace(skb, p->csum_off, old[3], new[3], l4_flags | 4))
			return -1;
		if (bpf_l3_csum_replace(skb, p->l3_off + offsetof(struct iphdr, check), old[3], new[3], 4))
			return -1;
		return bpf_skb_store_bytes(skb, off, &new[3], 4, 0);
	} else {
		__u32 off = p->l3_off + (src ? offsetof(struct ipv6hdr, saddr) : offsetof(struct ipv6hdr, daddr));
		__s64 diff = bpf_csum_diff((__be32 *)old, 16, (__be32 *)new, 16, 0);

		if (diff < 0 || bpf_l4_csum_replace(skb, p->csum_off, 0, diff, l4_flags))
			return -1;
		return bpf_skb_store_bytes(skb, off, new, 16, 0);
	}
}

static __always_inline int kpr_set_port(struct __sk_buff *skb, const struct kpr_pkt *p,
					__be16 old, __be16 new, bool src)
{
	__u64 l4_flags = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 off = p->l4_off + (src ? 0 : 2); /* source and dest ports lead both headers */

	if (old == new)
		return 0;
	if (bpf_l4_csum_replace(skb, p->csum_off, old, new, l4_flags | 2))
		return -1;
	return bpf_skb_store_bytes(skb, off, &new, 2, 0);
}

/* Applies a conntrack entry's rewrite to the packet. */
static __always_inline int kpr_rewrite(struct __sk_buff *skb, const struct kpr_pkt *p, const struct kpr_ct_val *ct)
{
	if (kpr_set_addr(skb, p, p->saddr, ct->nat_saddr, true) ||
	    kpr_set_addr(skb, p, p->daddr, ct->nat_daddr, false) ||
	    kpr_set_port(skb, p, p->sport, ct->nat_sport, true) ||
	    kpr_set_port(skb, p, p->dport, ct->nat_dport, false))
		return -1;
	return 0;
}

/*
 * Sends a rewritten packet on its way: FIB lookup for the new destination,
 * then a redirect with the right L2 addresses. When the FIB cannot decide
 * (local destination, no route), the stack gets the packet as it is now.
 */
static __always_inline int kpr_forward(struct __sk_buff *skb, const struct kpr_ct_val *ct, __u8 family, __u8 proto)
{
	struct bpf_fib_lookup fib = {};
	long rc;

	fib.family = family;
	fib.l4_protocol = proto;
	fib.sport = ct->nat_sport;
	fib.dport = ct->nat_dport;
	fib.tot_len = skb->len - sizeof(struct ethhdr);
	fib.ifindex = skb->ingress_ifindex;
	if (family == AF_INET) {
		fib.ipv4_src = ct->nat_saddr[3];
		fib.ipv4_dst = ct->nat_daddr[3];
	} else {
		kpr_addr_copy(fib.ipv6_src, ct->nat_saddr);
		kpr_addr_copy(fib.ipv6_dst, ct->nat_daddr);
	}
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		if (bpf_skb_store_bytes(skb, 0, fib.dmac, ETH_ALEN, 0) ||
		    bpf_skb_store_bytes(skb, ETH_ALEN, fib.smac, ETH_ALEN, 0))
			return TC_ACT_SHOT;
		return bpf_redirect(fib.ifindex, 0);
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib.ifindex, NULL, 0, 0);
	/* Translated, so kpr's: the chain ends here, as it does for a redirect. */
	return TC_ACT_OK;
}

static __always_inline __u64 kpr_timeout_ns(const struct kpr_config *cfg, __u8 proto, __u8 flags)
{
	__u32 s;

	if (proto == IPPROTO_UDP)
		s = cfg ? cfg->udp_timeout_s : 30;
	else if (flags & KPR_CT_F_CLOSING)
		s = cfg ? cfg->tcp_closing_timeout_s : 10;
	else
		s = cfg ? cfg->tcp_timeout_s : 86400;
	return (__u64)s * NSEC_PER_SEC;
}

static __always_inline void kpr_ct_key_set(struct kpr_ct_key *k, const __be32 *saddr, const __be32 *daddr,
					   __be16 sport, __be16 dport, __u8 proto, __u8 dir)
{
	__builtin_memset(k, 0, sizeof(*k));
	kpr_addr_copy(k->saddr, saddr);
	kpr_addr_copy(k->daddr, daddr);
	k->sport = sport;
	k->dport = dport;
	k->proto = proto;
	k->dir = dir;
}

static __always_inline void kpr_ct_key_of(struct kpr_ct_key *k, const struct kpr_pkt *p, __u8 dir)
{
	kpr_ct_key_set(k, p->saddr, p->daddr, p->sport, p->dport, p->proto, dir);
}

/* Refreshes an entry's deadline; FIN/RST move a TCP flow to the short timeout. */
static __always_inline void kpr_ct_touch(struct kpr_ct_val *ct, const struct kpr_pkt *p, const struct kpr_config *cfg, __u64 now)
{
	if (p->tcp_flags & (KPR_TCP_FIN | KPR_TCP_RST))
		ct->flags |= KPR_CT_F_CLOSING;
	ct->expires_ns = now + kpr_timeout_ns(cfg, p->proto, ct->flags);
}

/* The REPLY key of the flow whose ORIGINAL value is `orig`: the backend answering the source the flow left with. */
static __always_inline void kpr_ct_reply_key_of(struct kpr_ct_key *k, const struct kpr_ct_val *orig, __u8 proto)
{
	kpr_ct_key_set(k, orig->nat_daddr, orig->nat_saddr, orig->nat_dport, orig->nat_sport, proto, KPR_CT_DIR_REPLY);
}

/* The REPLY value of the flow `p` (a client packet) opened with ORIGINAL value `orig`: show the client the address it called. */
static __always_inline void kpr_ct_reply_val_of(struct kpr_ct_val *rev, const struct kpr_pkt *p, const struct kpr_ct_val *orig)
{
	__builtin_memset(rev, 0, sizeof(*rev));
	kpr_addr_copy(rev->nat_saddr, p->daddr);
	rev->nat_sport = p->dport;
	kpr_addr_copy(rev->nat_daddr, p->saddr);
	rev->nat_dport = p->sport;
	rev->rev_nat_id = orig->rev_nat_id;
	rev->flags = orig->flags;
	rev->expires_ns = orig->expires_ns;
}

/*
 * Chooses the source a new flow leaves with: the node address and a port of
 * kpr's SNAT range that neither the node's sockets nor another kpr flow
 * hold towards the backend (kpr_snat.h).
 */
static __always_inline int kpr_pick_snat(struct __sk_buff *skb, const struct kpr_pkt *p, const struct kpr_backend *be,
					 const struct kpr_config *cfg, struct kpr_ct_val *fwd, __u64 now)
{
	if (!cfg)
		return -1;
	kpr_addr_copy(fwd->nat_saddr, p->family == AF_INET ? cfg->snat_v4 : cfg->snat_v6);
	if (kpr_addr_is_zero(fwd->nat_saddr))
		return -1;
	fwd->nat_sport = kpr_snat_pick_port(skb, cfg, p->family, p->proto, p->saddr, p->sport, be->addr, be->port, fwd->nat_saddr, now);
	return fwd->nat_sport ? 0 : -1;
}

/* A new flow to a frontend: choose, record both directions, rewrite, forward. Each outcome is one kpr monitor event. */
static __always_inline int kpr_new_flow(struct __sk_buff *skb, struct kpr_pkt *p, __u8 role,
					const struct kpr_config *cfg, __u64 now)
{
	struct kpr_affinity_key client = {};
	struct kpr_ct_val fwd = {}, rev;
	struct kpr_ct_key k;
	struct kpr_svc_key key;
	struct kpr_svc_val *svc;
	struct kpr_svc_stat *stat;
	struct kpr_backend *be;
	__u32 backend_id = 0;
	__u8 hook = role == KPR_ROLE_POD ? KPR_HOOK_TC_POD : KPR_HOOK_TC_EXT;
	__u8 ev_flags = 0;
	bool snat;

	/* Pods are in-cluster callers: they get the INTERNAL set when one exists. */
	kpr_lb_svc_key_init(&key, p->daddr, p->dport, p->proto);
	svc = kpr_lb_lookup_service(&key, role == KPR_ROLE_POD);
	if (!svc) {
		if (kpr_svc_cidr_drop_tc(skb, &key, hook, p->saddr, p->sport, p->family))
			return TC_ACT_SHOT;
		return KPR_TC_PASS;
	}
	if (p->proto == IPPROTO_TCP && !(p->tcp_flags & KPR_TCP_SYN)) {
		kpr_count(KPR_STAT_TC_CT_LOST);
		ev_flags |= KPR_EVF_CT_LOST;
	}
	stat = kpr_svc_stat_of(cfg, svc->rev_nat_id);
	if (!kpr_lb_source_allowed(svc, p->saddr)) {
		kpr_count(KPR_STAT_TC_DROP_SOURCE_RANGE);
		if (stat)
			stat->dropped_source_range++;
		kpr_emit(skb, hook, KPR_EV_SOURCE_RANGE, ev_flags, &key, svc, NULL, 0, p->saddr, p->sport, p->family);
		return TC_ACT_SHOT;
	}
	if (svc->count == 0) {
		/* eTP=Local without local endpoints drops, like kube-proxy; so does no endpoint at all. */
		kpr_count(KPR_STAT_TC_DROP_NO_BACKEND);
		if (stat) {
			if (svc->flags & KPR_SVC_F_LOCAL_ONLY)
				stat->dropped_no_local_endpoint++;
			else
				stat->dropped_no_endpoint++;
		}
		kpr_emit(skb, hook, svc->flags & KPR_SVC_F_LOCAL_ONLY ? KPR_EV_NO_LOCAL_ENDPOINT : KPR_EV_NO_ENDPOINT, ev_flags, &key, svc, NULL, 0, p->saddr, p->sport, p->family);
		return TC_ACT_SHOT;
	}
	/* Affinity by client address (netns cookie 0), as kube-proxy's ClientIP. */
	kpr_addr_copy(client.client, p->saddr);
	be = kpr_lb_select_backend(&key, svc, &client, now, &backend_id, &ev_flags);
	if (!be) {
		kpr_count(KPR_STAT_BACKEND_MISSING);
		kpr_emit(skb, hook, KPR_EV_BACKEND_MISSING, ev_flags, &key, svc, NULL, backend_id, p->saddr, p->sport, p->family);
		return KPR_TC_PASS; /* untranslated: goes on as if kpr were not there */
	}

	/*
	 * External traffic is SNATed to the node (kube-proxy masquerades it) unless
	 * the frontend preserves the client address (externalTrafficPolicy=Local).
	 * Pod traffic keeps its source, except a pod reaching itself (hairpin)
	 * and, with masquerade on, external addresses (kpr_masq.h).
	 */
	if (role == KPR_ROLE_EXT)
		snat = !(svc->flags & KPR_SVC_F_LOCAL_ONLY);
	else
		snat = kpr_masq_pod_snat(cfg, svc, be->addr, p->saddr);

	kpr_addr_copy(fwd.nat_daddr, be->addr);
	fwd.nat_dport = be->port;
	if (snat) {
		if (kpr_pick_snat(skb, p, be, cfg, &fwd, now)) {
			kpr_count(KPR_STAT_TC_DROP_NO_SNAT_PORT);
			kpr_emit(skb, hook, KPR_EV_NO_SNAT_PORT, ev_flags, &key, svc, be, backend_id, p->saddr, p->sport, p->family);
			return TC_ACT_SHOT;
		}
		fwd.flags = KPR_CT_F_SNAT;
		ev_flags |= KPR_EVF_SNAT;
	} else {
		kpr_addr_copy(fwd.nat_saddr, p->saddr);
		fwd.nat_sport = p->sport;
	}
	fwd.backend_id = backend_id;
	fwd.rev_nat_id = svc->rev_nat_id;
	kpr_ct_touch(&fwd, p, cfg, now);

	kpr_ct_reply_val_of(&rev, p, &fwd);
	kpr_ct_reply_key_of(&k, &fwd, p->proto);
	if (bpf_map_update_elem(&kpr_ct, &k, &rev, BPF_ANY))
		return TC_ACT_SHOT;
	kpr_ct_mirror(&k, &rev, cfg);
	kpr_ct_key_of(&k, p, KPR_CT_DIR_ORIGINAL);
	if (bpf_map_update_elem(&kpr_ct, &k, &fwd, BPF_ANY))
		return TC_ACT_SHOT;
	kpr_ct_mirror(&k, &fwd, cfg);

	if (kpr_rewrite(skb, p, &fwd))
		return TC_ACT_SHOT;
	kpr_count(KPR_STAT_TC_DNAT);
	if (stat)
		stat->balanced++; /* per-CPU slot: no atomic needed */
	kpr_emit(skb, hook, KPR_EV_TRANSLATED, ev_flags, &key, svc, be, backend_id, p->saddr, p->sport, p->family);
	return kpr_forward(skb, &fwd, p->family, p->proto);
}

/*
 * Deletes the REPLY entry of the closed flow whose ORIGINAL entry is `orig`
 * (`p`: a packet of that flow's client), but only while it is that flow's:
 * after the closed flow's REPLY entry expired or was swept, its reply tuple
 * (backend, SNAT address and port) may have gone to another client's flow,
 * and deleting that would send the other flow's replies to the node's own
 * stack, which resets them.
 */
static __always_inline void kpr_ct_forget_reply(const struct kpr_ct_val *orig, const struct kpr_pkt *p, const struct kpr_config *cfg)
{
	struct kpr_ct_key k;
	struct kpr_ct_val *rev;

	kpr_ct_reply_key_of(&k, orig, p->proto);
	rev = kpr_ct_lookup(&k, cfg);
	if (rev && kpr_addr_eq(rev->nat_daddr, p->saddr) && rev->nat_dport == p->sport)
		kpr_ct_delete(&k, cfg);
}

/*
 * Puts back the REPLY entry of the live flow whose ORIGINAL entry is `orig`
 * (`p`: a packet of that flow's client) when it is gone. kpr_ct is an LRU
 * map, which evicts one entry at a time, not one flow, and the two entries
 * of a flow are written, refreshed and swept apart: a flow can lose its REPLY
 * entry while its ORIGINAL entry lives on. Its client's packets still reach
 * the backend, but every answer then misses, goes up the node's own stack
 * and is reset, retransmission after retransmission, until the client gives
 * up. The client's next packet rebuilds the entry from what it still has.
 * A live entry on the tuple is left alone even when it names another client:
 * with this flow's entry gone, the tuple looked free to kpr_pick_snat, and
 * the flow that took it is the one that gets its replies now.
 * Called last on the packet's path: in a full LRU map the update may recycle
 * the element `orig` points to.
 */
static __always_inline void kpr_ct_restore_reply(const struct kpr_ct_val *orig, const struct kpr_pkt *p,
						 const struct kpr_config *cfg, __u64 now)
{
	struct kpr_ct_key k;
	struct kpr_ct_val rev;
	struct kpr_ct_val *cur;

	kpr_ct_reply_key_of(&k, orig, p->proto);
	cur = kpr_ct_lookup(&k, cfg);
	if (cur && cur->expires_ns > now)
		return;
	kpr_ct_reply_val_of(&rev, p, orig);
	if (bpf_map_update_elem(&kpr_ct, &k, &rev, BPF_ANY))
		return;
	kpr_ct_mirror(&k, &rev, cfg);
	kpr_count(KPR_STAT_TC_CT_REPLY_RESTORED);
}

/* True when the ORIGINAL entry's backend is still the one the service names. */
static __always_inline bool kpr_ct_backend_live(const struct kpr_ct_val *ct)
{
	struct kpr_backend *be = bpf_map_lookup_elem(&kpr_backend, &ct->backend_id);

	return be && kpr_addr_eq(be->addr, ct->nat_daddr) && be->port == ct->nat_dport;
}

/*
 * An SCTP packet: dropped, counted and told when it is bound for a frontend,
 * passed otherwise; never rewritten (see struct kpr_sctphdr). kpr makes no
 * conntrack entry for SCTP, so this is the whole SCTP path. Pods are
 * in-cluster callers, as in kpr_new_flow: the INTERNAL set counts for them.
 */
static __always_inline int kpr_sctp(struct __sk_buff *skb, const struct kpr_pkt *p, __u8 role)
{
	struct kpr_svc_key key;
	struct kpr_svc_val *svc;
	__u8 hook = role == KPR_ROLE_POD ? KPR_HOOK_TC_POD : KPR_HOOK_TC_EXT;

	kpr_lb_svc_key_init(&key, p->daddr, p->dport, p->proto);
	svc = kpr_lb_lookup_service(&key, role == KPR_ROLE_POD);
	if (!svc)
		return kpr_svc_cidr_drop_tc(skb, &key, hook, p->saddr, p->sport, p->family) ? TC_ACT_SHOT : KPR_TC_PASS;
	kpr_count(KPR_STAT_TC_DROP_SCTP);
	kpr_emit(skb, hook, KPR_EV_SCTP_UNSUPPORTED, 0, &key, svc, NULL, 0, p->saddr, p->sport, p->family);
	return TC_ACT_SHOT;
}

static __always_inline int kpr_tc(struct __sk_buff *skb, __u8 role)
{
	struct kpr_config *cfg = kpr_cfg();
	struct kpr_pkt p = {};
	struct kpr_ct_key k;
	struct kpr_ct_val *ct;
	__u64 now;

	switch (kpr_parse(skb, &p)) {
	case 0:
		break;
	case KPR_MALFORMED:
		kpr_count(KPR_STAT_TC_PASS_MALFORMED);
		return KPR_TC_PASS;
	default:
		return KPR_TC_PASS;
	}
	if (p.proto == IPPROTO_SCTP)
		return kpr_sctp(skb, &p, role);
	now = bpf_ktime_get_ns();

	/* A reply of a flow NATed here: show the client the address it called. */
	kpr_ct_key_of(&k, &p, KPR_CT_DIR_REPLY);
	ct = kpr_ct_lookup(&k, cfg);
	if (ct && ct->expires_ns > now) {
		kpr_ct_touch(ct, &p, cfg, now);
		if (kpr_rewrite(skb, &p, ct))
			return TC_ACT_SHOT;
		kpr_count(KPR_STAT_TC_REVNAT);
		return kpr_forward(skb, ct, p.family, p.proto);
	}

	/* A packet of a flow already NATed: same backend, same rewrite. */
	kpr_ct_key_of(&k, &p, KPR_CT_DIR_ORIGINAL);
	ct = kpr_ct_lookup(&k, cfg);
	/*
	 * A SYN on a flow that already closed is a new connection reusing the
	 * client port (conntrack does the same): balance it afresh. The closed
	 * flow's reply entry goes first, so the new flow can get the same SNAT
	 * port (the first candidate hashes the client's address and port)
	 * instead of another that may collide with a TIME_WAIT connection on
	 * the backend.
	 */
	if (ct && (ct->flags & KPR_CT_F_CLOSING) && (p.tcp_flags & KPR_TCP_SYN)) {
		kpr_ct_forget_reply(ct, &p, cfg);
		ct = NULL;
	}
	if (ct && ct->expires_ns > now && kpr_ct_backend_live(ct)) {
		int verdict;

		kpr_ct_touch(ct, &p, cfg, now);
		if (kpr_rewrite(skb, &p, ct))
			return TC_ACT_SHOT;
		kpr_count(KPR_STAT_TC_FWD);
		verdict = kpr_forward(skb, ct, p.family, p.proto);
		kpr_ct_restore_reply(ct, &p, cfg, now);
		return verdict;
	}

	return kpr_new_flow(skb, &p, role, cfg, now);
}

SEC("tc")
int kpr_tc_ext(struct __sk_buff *skb)
{
	return kpr_tc(skb, KPR_ROLE_EXT);
}

SEC("tc")
int kpr_tc_pod(struct __sk_buff *skb)
{
	return kpr_tc(skb, KPR_ROLE_POD);
}
