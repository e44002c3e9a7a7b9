/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Backend selection: which of a frontend's backends a new connection gets
 * when ClientIP affinity does not decide (kpr_lb.h asks affinity first).
 * One dispatch, kpr_lb_select(), keyed by the algorithm the agent wrote into
 * the frontend's slot 0 (enum kpr_svc_alg, bits 12-15 of its flags), so the
 * socket hooks and the tc path choose alike and an algorithm is added here
 * alone: one enum value, one function, one case. Each algorithm returns the
 * backend and its id, or NULL when the slot or backend it names is gone
 * (a race with the agent; the caller counts it).
 *
 * Today there is one, RANDOM. An algorithm this build does not know (a
 * newer agent's, during a downgrade) selects at random too: the frontend
 * keeps working, only not the way the agent asked, until the agent that
 * knows it runs again.
 */
#ifndef __KPR_LB_SELECT_H
#define __KPR_LB_SELECT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "kpr_types.h"
#include "kpr_maps.h"

/* The selection algorithm of a frontend (its slot 0). */
static __always_inline __u8 kpr_svc_algorithm(const struct kpr_svc_val *svc)
{
	return (svc->flags >> KPR_SVC_ALG_SHIFT) & KPR_SVC_ALG_MASK;
}

/* The backend in slot `slot` (1..count) of the frontend whose key is *key. */
static __always_inline struct kpr_backend *kpr_lb_backend_by_slot(struct kpr_svc_key *key, __u16 slot, __u32 *backend_id)
{
	struct kpr_svc_val *val;

	key->slot = slot;
	val = bpf_map_lookup_elem(&kpr_svc, key);
	if (!val)
		return NULL;
	*backend_id = val->backend_id;
	return bpf_map_lookup_elem(&kpr_backend, backend_id);
}

/* KPR_SVC_ALG_RANDOM: uniform over slots 1..count, as kube-proxy's statistic-mode rules. */
static __always_inline struct kpr_backend *kpr_lb_select_random(struct kpr_svc_key *key, const struct kpr_svc_val *svc,
								__u32 *backend_id, __u16 *slot)
{
	*slot = (bpf_get_prandom_u32() % svc->count) + 1;
	return kpr_lb_backend_by_slot(key, *slot, backend_id);
}

/*
 * The backend for a new connection to the frontend whose slot 0 is *svc
 * (key: its key as kpr_lb_lookup_service left it; svc->count > 0), and in
 * *slot the slot it chose (kpr_lb_select_other redraws among the others).
 */
static __always_inline struct kpr_backend *kpr_lb_select(struct kpr_svc_key *key, const struct kpr_svc_val *svc,
							 __u32 *backend_id, __u16 *slot)
{
	switch (kpr_svc_algorithm(svc)) {
	case KPR_SVC_ALG_RANDOM:
	default:
		return kpr_lb_select_random(key, svc, backend_id, slot);
	}
}

#endif /* __KPR_LB_SELECT_H */
