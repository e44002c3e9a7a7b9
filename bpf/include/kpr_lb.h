/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The one load-balancing pipeline every kpr program runs, in three steps:
 *
 *   kpr_lb_lookup_service  frontend (address, port, protocol) -> master entry
 *   kpr_lb_select_backend  master entry -> backend, ClientIP affinity first,
 *                          then the frontend's algorithm (kpr_lb_select.h)
 *   translate              the caller's: the socket hooks rewrite the
 *                          destination and record reverse NAT
 *                          (kpr_sock.bpf.c), the tc path records conntrack
 *                          and rewrites the packet (kpr_tc.bpf.c).
 *
 * Between lookup and select each caller applies its own policy (source
 * ranges, an empty backend set refused or dropped); the steps themselves
 * know nothing of sockets or packets. Everything is __always_inline, as
 * before the pipeline was shared: each program keeps its own straight-line
 * copy and its verifier cost (no bpf-to-bpf calls, no loops).
 */
#ifndef __KPR_LB_H
#define __KPR_LB_H

#include <linux/bpf.h>
#include <stdbool.h>

#include "kpr_maps.h"
#include "kpr_addr.h"
#include "kpr_common.h"
#include "kpr_migrate.h"
#include "kpr_lb_select.h"

static __always_inline bool kpr_lb_svc_has_affinity(const struct kpr_svc_val *svc)
{
	return svc->flags & KPR_SVC_F_AFFINITY;
}

/* The key of a frontend's master entry; the scope is chosen by the lookup. */
static __always_inline void kpr_lb_svc_key_init(struct kpr_svc_key *key, const __be32 *addr, __be16 port, __u8 proto)
{
	__builtin_memset(key, 0, sizeof(*key));
	kpr_addr_copy(key->addr, addr);
	key->port = port;
	key->proto = proto;
}

/*
 * The master entry (slot 0) for the frontend in *key, or NULL when it is no
 * frontend. In-node callers (processes on the node, pods) are in-cluster:
 * they get the INTERNAL entry set when the frontend has one, the EXTERNAL set
 * otherwise. Leaves key->scope at the set found, for kpr_lb_select_backend.
 */
static __always_inline struct kpr_svc_val *kpr_lb_lookup_service(struct kpr_svc_key *key, bool in_node)
{
	struct kpr_svc_val *svc;

	key->slot = 0;
	if (in_node) {
		key->scope = KPR_SCOPE_INTERNAL;
		svc = bpf_map_lookup_elem(&kpr_svc, key);
		if (svc)
			return svc;
	}
	key->scope = KPR_SCOPE_EXTERNAL;
	return bpf_map_lookup_elem(&kpr_svc, key);
}

/* loadBalancerSourceRanges: may this client call this frontend? */
static __always_inline bool kpr_lb_source_allowed(const struct kpr_svc_val *svc, const __be32 *client)
{
	struct kpr_src_range_key k = {};

	if (!(svc->flags & KPR_SVC_F_SOURCE_RANGES))
		return true;
	k.prefixlen = 32 + 128;
	k.frontend_id = svc->frontend_id;
	kpr_addr_copy(k.addr, client);
	return bpf_map_lookup_elem(&kpr_src_range, &k) != NULL;
}

/*
 * The client's affinity backend, if its entry is younger than the
 * frontend's timeout and the backend still serves the frontend (kpr_aff_match);
 * the entry's clock is restarted then, since this connection uses it.
 */
static __always_inline struct kpr_backend *
kpr_lb_affinity_backend(const struct kpr_svc_val *svc, const struct kpr_affinity_key *client, __u64 now, __u32 *backend_id)
{
	__u64 timeout_ns = (__u64)svc->affinity_timeout_s * NSEC_PER_SEC;
	struct kpr_affinity_match_key mkey = {};
	struct kpr_affinity_val *aval;
	struct kpr_backend *be;

	aval = kpr_affinity_lookup(client);
	if (!aval || now - aval->last_used_ns > timeout_ns)
		return NULL;
	mkey.backend_id = aval->backend_id;
	mkey.frontend_id = svc->frontend_id;
	if (!bpf_map_lookup_elem(&kpr_aff_match, &mkey))
		return NULL;
	*backend_id = aval->backend_id;
	be = bpf_map_lookup_elem(&kpr_backend, backend_id);
	if (be)
		aval->last_used_ns = now;
	return be;
}

/* With affinity, the client's backend from now on (best effort: a full LRU evicts an idle client's entry). */
static __always_inline void kpr_lb_remember(const struct kpr_svc_val *svc, struct kpr_affinity_key *client, __u64 now, __u32 backend_id)
{
	struct kpr_affinity_val aval = {};

	if (!kpr_lb_svc_has_affinity(svc))
		return;
	client->frontend_id = svc->frontend_id;
	aval.last_used_ns = now;
	aval.backend_id = backend_id;
	bpf_map_update_elem(&kpr_affinity, client, &aval, BPF_ANY);
}

/*
 * Chooses the backend for a new connection (a connect or datagram on the
 * socket path, a new flow on the tc path) to the frontend found by
 * kpr_lb_lookup_service. *client names the caller for ClientIP affinity
 * (network namespace cookie or client address, see struct kpr_affinity_key);
 * it is read only when the frontend has affinity, and then now must be
 * bpf_ktime_get_ns(). Without a usable affinity entry the frontend's
 * algorithm chooses (kpr_lb_select.h: random or Maglev), and with affinity the
 * choice is remembered. Either way the entry's last use becomes
 * now: the timeout runs from the client's last new connection, as
 * kube-proxy's `recent --set` in the nat table (docs/architecture.md).
 * svc->count must be > 0. An affinity hit sets KPR_EVF_AFFINITY in *ev_flags.
 * *slot is the slot drawn, 0 for an affinity hit. *flow is the connection's
 * tuple for a hashing algorithm (Maglev), NULL when unknown.
 */
static __always_inline struct kpr_backend *
kpr_lb_select_backend(struct kpr_svc_key *key, const struct kpr_svc_val *svc, struct kpr_affinity_key *client,
		      const struct kpr_flow *flow, __u64 now, __u32 *backend_id, __u8 *ev_flags, __u16 *slot)
{
	struct kpr_backend *be;

	*slot = 0;
	if (kpr_lb_svc_has_affinity(svc)) {
		client->frontend_id = svc->frontend_id;
		be = kpr_lb_affinity_backend(svc, client, now, backend_id);
		if (be) {
			kpr_count(KPR_STAT_AFFINITY_HIT);
			*ev_flags |= KPR_EVF_AFFINITY;
			return be;
		}
	}
	be = kpr_lb_select(key, svc, flow, backend_id, slot);
	if (be)
		kpr_lb_remember(svc, client, now, *backend_id);
	return be;
}

/*
 * A backend other than the one in slot `skip` (1..count; 0: unknown, an
 * affinity hit), uniform over the other slots when `skip` is known, and
 * remembered for affinity. svc->count must be > 1. Used only to keep a node
 * from sending a flow to itself (docs/semantics.md rule 38): a redraw, so it
 * is uniform whatever the frontend's algorithm.
 */
static __always_inline struct kpr_backend *
kpr_lb_select_other(struct kpr_svc_key *key, const struct kpr_svc_val *svc, struct kpr_affinity_key *client,
		    __u64 now, __u16 skip, __u32 *backend_id)
{
	struct kpr_backend *be;
	__u16 slot;

	if (skip == 0 || skip > svc->count)
		skip = (bpf_get_prandom_u32() % svc->count) + 1;
	slot = (bpf_get_prandom_u32() % (svc->count - 1)) + 1;
	if (slot >= skip)
		slot++;
	be = kpr_lb_backend_by_slot(key, slot, backend_id);
	if (be)
		kpr_lb_remember(svc, client, now, *backend_id);
	return be;
}

#endif /* __KPR_LB_H */
