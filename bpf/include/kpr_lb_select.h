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
 * Two today: RANDOM and MAGLEV. An algorithm this build does not know (a
 * newer agent's, during a downgrade) selects at random too: the frontend
 * keeps working, only not the way the agent asked, until the agent that
 * knows it runs again.
 *
 * MAGLEV hashes the flow (struct kpr_flow) into the frontend's lookup table
 * (kpr_maglev_ref names it, kpr_maglev holds it), computed by the agent
 * (agent/lb/maglev.ts): every node with the same backends picks the same
 * backend for the same 5-tuple. The hash is the agent's tupleHash
 * (agent/lb/maglev-hash.ts) bit for bit: test/bpf/maglev.test.ts compares
 * them. A caller with no tuple to hash (the socket path before the socket
 * has a source port) passes NULL and gets RANDOM.
 */
#ifndef __KPR_LB_SELECT_H
#define __KPR_LB_SELECT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include <bpf/bpf_endian.h>

#include "kpr_types.h"
#include "kpr_maps.h"
#include "kpr_common.h"

/* What Maglev hashes: the flow's addresses (16 bytes, IPv4 mapped) and ports as in the packet. */
struct kpr_flow {
	const __be32 *saddr;
	const __be32 *daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
};

/* The 5-tuple hash's initval before the protocol is mixed in: "kpr5" (MAGLEV_TUPLE_SEED). */
#define KPR_MAGLEV_TUPLE_SEED 0x6b707235

static __always_inline __u32 kpr_rol32(__u32 w, __u32 s)
{
	return (w << s) | (w >> (32 - s));
}

/* The kernel's jhash_3words (include/linux/jhash.h): three words in, Bob Jenkins' final mix. */
static __always_inline __u32 kpr_jhash_3words(__u32 a, __u32 b, __u32 c, __u32 initval)
{
	initval += 0xdeadbeef + (3 << 2);
	a += initval;
	b += initval;
	c += initval;
	c ^= b; c -= kpr_rol32(b, 14);
	a ^= c; a -= kpr_rol32(c, 11);
	b ^= a; b -= kpr_rol32(a, 25);
	c ^= b; c -= kpr_rol32(b, 16);
	a ^= c; a -= kpr_rol32(c, 4);
	b ^= a; b -= kpr_rol32(a, 14);
	c ^= b; c -= kpr_rol32(b, 24);
	return c;
}

/*
 * The flow hash (agent/lb/maglev-hash.ts tupleHash): each address folded to
 * one word by XOR, ports as host-order halves of the third word, the
 * protocol in the initval. Host-order words, so every node agrees whatever
 * its byte order.
 */
static __always_inline __u32 kpr_flow_hash(const struct kpr_flow *f)
{
	__u32 a = bpf_ntohl(f->saddr[0] ^ f->saddr[1] ^ f->saddr[2] ^ f->saddr[3]);
	__u32 b = bpf_ntohl(f->daddr[0] ^ f->daddr[1] ^ f->daddr[2] ^ f->daddr[3]);
	__u32 c = ((__u32)bpf_ntohs(f->sport) << 16) | bpf_ntohs(f->dport);

	return kpr_jhash_3words(a, b, c, KPR_MAGLEV_TUPLE_SEED ^ f->proto);
}

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
 * The slot (1..count) a flow hash picks in the Maglev table of the entry
 * set (svc->frontend_id, key->scope), or 0 when the table is not (or not
 * yet, or no longer) there or names a slot past count. The slot is
 * (hash * M) >> 32 (slotOf in agent/lb/maglev-hash.ts: no division).
 */
static __always_inline __u16 kpr_maglev_slot(const struct kpr_svc_key *key, const struct kpr_svc_val *svc, __u32 hash)
{
	struct kpr_maglev_ref_key rk = {};
	struct kpr_maglev_key ck = {};
	struct kpr_maglev_chunk *chunk;
	struct kpr_maglev_ref *ref;
	__u32 idx;
	__u16 s;

	rk.frontend_id = svc->frontend_id;
	rk.scope = key->scope;
	ref = bpf_map_lookup_elem(&kpr_maglev_ref, &rk);
	if (!ref)
		return 0;
	idx = (__u32)(((__u64)hash * ref->m) >> 32);
	ck.table_id = ref->table_id;
	ck.chunk = idx >> KPR_MAGLEV_CHUNK_SHIFT;
	chunk = bpf_map_lookup_elem(&kpr_maglev, &ck);
	if (!chunk)
		return 0;
	s = chunk->slots[idx & (KPR_MAGLEV_CHUNK - 1)];
	/* A table ahead of (or behind) the count the reader saw: never a slot that is not there. */
	if (s > svc->count)
		return 0;
	return s;
}

/* KPR_SVC_ALG_MAGLEV: the flow's slot in the frontend's table; RANDOM (counted) without a flow or a table. */
static __always_inline struct kpr_backend *kpr_lb_select_maglev(struct kpr_svc_key *key, const struct kpr_svc_val *svc,
								const struct kpr_flow *flow, __u32 *backend_id, __u16 *slot)
{
	__u16 s;

	if (!flow) {
		kpr_count(KPR_STAT_MAGLEV_SOCK_UNBOUND);
		return kpr_lb_select_random(key, svc, backend_id, slot);
	}
	s = kpr_maglev_slot(key, svc, kpr_flow_hash(flow));
	if (s == 0) {
		kpr_count(KPR_STAT_MAGLEV_FALLBACK);
		return kpr_lb_select_random(key, svc, backend_id, slot);
	}
	*slot = s;
	return kpr_lb_backend_by_slot(key, s, backend_id);
}

/*
 * The backend for a new connection to the frontend whose slot 0 is *svc
 * (key: its key as kpr_lb_lookup_service left it; svc->count > 0), and in
 * *slot the slot it chose (kpr_lb_select_other redraws among the others).
 * *flow: the connection's tuple for the algorithms that hash it; NULL when
 * the caller does not know it.
 */
static __always_inline struct kpr_backend *kpr_lb_select(struct kpr_svc_key *key, const struct kpr_svc_val *svc,
							 const struct kpr_flow *flow, __u32 *backend_id, __u16 *slot)
{
	switch (kpr_svc_algorithm(svc)) {
	case KPR_SVC_ALG_MAGLEV:
		return kpr_lb_select_maglev(key, svc, flow, backend_id, slot);
	case KPR_SVC_ALG_RANDOM:
	default:
		return kpr_lb_select_random(key, svc, backend_id, slot);
	}
}

#endif /* __KPR_LB_SELECT_H */
