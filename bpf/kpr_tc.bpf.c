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
 * This file is the order of the steps and the drop policy (source ranges,
 * empty sets); each step is a header of its own:
 *   kpr_parse.h      the packet's addresses, ports and offsets
 *   kpr_conntrack.h  the flow's two kpr_ct entries, deadlines, repairs
 *   kpr_lb.h         frontend lookup and backend choice (ClientIP affinity
 *                    by client address; the algorithm: kpr_lb_select.h),
 *                    the pipeline the socket hooks use too
 *   kpr_nat.h        the rewrite with its checksums, the SNAT source
 *                    (its port search: kpr_snat.h; pod masquerade: kpr_masq.h)
 *   kpr_forward.h    FIB lookup and redirect of a rewritten packet
 * Anything kpr_parse() does not fully parse is passed untouched.
 *
 * Other programs on the same hook (a CNI's, a network policy agent's, a
 * user's): a packet that is not kpr's gets KPR_TC_PASS, so the next program
 * runs; a packet kpr translated or dropped ends the chain at kpr
 * (docs/architecture.md, *Other tc programs on the same interface*).
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "kpr_types.h"
#include "kpr_maps.h"
#include "kpr_addr.h"
#include "kpr_common.h"
#include "kpr_parse.h"
#include "kpr_conntrack.h"
#include "kpr_nat.h"
#include "kpr_forward.h"
#include "kpr_lb.h"
#include "kpr_monitor.h"
#include "kpr_masq.h"
#include "kpr_svc_cidr.h"

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

/* A new flow to a frontend: choose, record both directions, rewrite, forward. Each outcome is one kpr monitor event. */
static __always_inline int kpr_new_flow(struct __sk_buff *skb, struct kpr_pkt *p, __u8 role,
					const struct kpr_config *cfg, __u64 now)
{
	struct kpr_affinity_key client = {};
	struct kpr_flow flow = {};
	__be32 no_addr[4] = {};
	struct kpr_ct_val fwd = {}, rev;
	struct kpr_ct_key k;
	struct kpr_svc_key key;
	struct kpr_svc_val *svc;
	struct kpr_svc_stat *stat;
	struct kpr_backend *be;
	__u32 backend_id = 0;
	__u16 slot;
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
	stat = kpr_svc_stat_of(cfg, svc->frontend_id);
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
	/*
	 * Maglev hashes the packet's 5-tuple; a NodePort frontend's leaves out
	 * the destination address, which is this node's own, so every node picks
	 * the same backend for a client's flow (docs/semantics.md rule 40).
	 */
	flow.saddr = p->saddr;
	flow.daddr = (svc->flags & KPR_SVC_F_NODE_PORT) ? no_addr : p->daddr;
	flow.sport = p->sport;
	flow.dport = p->dport;
	flow.proto = p->proto;
	be = kpr_lb_select_backend(&key, svc, &client, &flow, now, &backend_id, &ev_flags, &slot);
	/*
	 * tc cannot serve the node itself (a hostNetwork endpoint, kpr_masq.h):
	 * the server's answers leave the node without passing a kpr program, so
	 * they would not be translated back. While another backend exists, the
	 * flow goes there. A pod the socket hooks serve reaches the node's server
	 * on the socket path when they choose it, so over both paths the choice
	 * stays uniform (rule 38 of docs/semantics.md).
	 */
	if (be && svc->count > 1 && kpr_masq_backend_is_node(cfg, be))
		be = kpr_lb_select_other(&key, svc, &client, now, slot, &backend_id);
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
	fwd.frontend_id = svc->frontend_id;
	kpr_ct_touch(&fwd, p, cfg, now);

	/*
	 * REPLY first: should the ORIGINAL update fail, the packet is dropped and
	 * the client retransmits, and a REPLY entry alone only matches answers to
	 * a packet that never left; an ORIGINAL entry alone would send the
	 * client's packets to a backend whose answers miss conntrack.
	 */
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
 * An SCTP packet: dropped, counted and told when it is bound for a frontend,
 * passed otherwise; never rewritten (see struct kpr_sctphdr in kpr_parse.h).
 * kpr makes no conntrack entry for SCTP, so this is the whole SCTP path. Pods
 * are in-cluster callers, as in kpr_new_flow: the INTERNAL set counts for them.
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
		if (p.tcp_flags & KPR_TCP_SYN)
			ct->flags |= KPR_CT_F_ANSWERED;
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
	 * the backend. A flow its client reset before any answer is not over:
	 * the SYN retries the same connect, on the same backend and port
	 * (kpr_ct_unanswered says why).
	 */
	if (ct && (ct->flags & KPR_CT_F_CLOSING) && (p.tcp_flags & KPR_TCP_SYN)) {
		if (kpr_ct_unanswered(ct, &p, cfg)) {
			ct->flags &= ~KPR_CT_F_CLOSING;
			kpr_count(KPR_STAT_TC_SYN_RETRY_KEPT);
		} else {
			kpr_ct_forget_reply(ct, &p, cfg);
			ct = NULL;
		}
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
