/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Conntrack for the tc path (kpr_ct, struct kpr_ct_key/kpr_ct_val): the two
 * entries of a NATed flow, ORIGINAL keyed by the packet as the client sends
 * it and REPLY by the packet as the backend answers, their deadlines, and
 * the repairs an LRU map needs (it evicts entries, not flows). The map
 * access that reads through to the old map during a live migration is
 * kpr_migrate.h's; this header decides what the entries hold. It does not
 * rewrite packets (kpr_nat.h) nor choose backends (kpr_lb.h).
 * A new flow's two updates are written out in kpr_new_flow (kpr_tc.bpf.c)
 * rather than wrapped in a helper here: the helper's shape (a status the
 * caller tests again) cost the verifier 18% more in kpr_tc_ext and 57% more
 * in kpr_tc_pod on 6.18, for the same work.
 */
#ifndef __KPR_CONNTRACK_H
#define __KPR_CONNTRACK_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>

#include "kpr_types.h"
#include "kpr_maps.h"
#include "kpr_addr.h"
#include "kpr_common.h"
#include "kpr_migrate.h"
#include "kpr_parse.h"

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
	rev->frontend_id = orig->frontend_id;
	rev->flags = orig->flags;
	rev->expires_ns = orig->expires_ns;
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
 * True when the closing flow whose ORIGINAL entry is `orig` was never
 * answered: its REPLY entry, still this flow's, saw no SYN-ACK. A client
 * that resets a connect before any answer and sends a SYN again retries
 * that connect, and the retry must leave as the first try did. The case
 * that matters: the SNAT port met a TIME_WAIT connection on the backend
 * (kpr_ct forgets a closed flow long before the backend's 60 s TIME_WAIT
 * ends, and kpr_snat.h cannot see the backend's sockets), which answered
 * the SYN with the old connection's ACK; the client's reset to that ACK
 * ended the TIME_WAIT and its kernel retries at once. Balanced afresh, the
 * retry would take another port, which may meet another TIME_WAIT, until
 * the client gives up; on the same port it finds the backend free.
 * netfilter gets there by keeping the client's port as the SNAT port.
 */
static __always_inline bool kpr_ct_unanswered(const struct kpr_ct_val *orig, const struct kpr_pkt *p, const struct kpr_config *cfg)
{
	struct kpr_ct_key k;
	struct kpr_ct_val *rev;

	kpr_ct_reply_key_of(&k, orig, p->proto);
	rev = kpr_ct_lookup(&k, cfg);
	return rev && kpr_addr_eq(rev->nat_daddr, p->saddr) && rev->nat_dport == p->sport && !(rev->flags & KPR_CT_F_ANSWERED);
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

#endif /* __KPR_CONNTRACK_H */
