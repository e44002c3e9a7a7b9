/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Live map migration (docs/architecture.md, "Upgrades: versioned pins and
 * live migration"). When an agent finds its maps pinned at an older layout
 * version or another size, it builds a new set beside them and swaps the
 * programs to it; the state the previous programs keep creating (conntrack,
 * reverse NAT, affinity) is copied into the new maps right after the swap.
 * Until that copy is done the agent sets KPR_CFG_F_MIGRATING, and a miss in
 * kpr_ct, kpr_revnat or kpr_affinity is looked up again in the old map,
 * which the agent hands to the programs as the *_prev maps below at load
 * (bpf_map__reuse_fd): an entry the old programs made after nothing could
 * copy it any more is never missed. The other way round, a new flow's
 * conntrack entries go to the old map too: the tc programs are swapped one
 * interface at a time, and an old program on an interface not swapped yet
 * (the one the replies arrive on, say) must find them. Outside a migration
 * the *_prev maps are one-entry placeholders that are never read.
 *
 * The old map may hold an older layout: only members that sit at the same
 * offset in every layout an agent migrates from are read and written here
 * (addresses, ports, backend id, deadline, flags), which is why the layouts
 * keep them in place from version to version (kpr_types.h).
 */
#ifndef __KPR_MIGRATE_H
#define __KPR_MIGRATE_H

#include "kpr_maps.h"
#include "kpr_common.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct kpr_ct_key);
	__type(value, struct kpr_ct_val);
} kpr_ct_prev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct kpr_revnat_key);
	__type(value, struct kpr_revnat_val);
} kpr_revnat_prev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct kpr_affinity_key);
	__type(value, struct kpr_affinity_val);
} kpr_aff_prev SEC(".maps");

static __always_inline bool kpr_migrating(const struct kpr_config *cfg)
{
	return cfg && (cfg->flags & KPR_CFG_F_MIGRATING);
}

/* A conntrack entry: this set's, else (during a migration) the old set's. */
static __always_inline struct kpr_ct_val *kpr_ct_lookup(const struct kpr_ct_key *k, const struct kpr_config *cfg)
{
	struct kpr_ct_val *ct = bpf_map_lookup_elem(&kpr_ct, k);

	if (!ct && kpr_migrating(cfg))
		ct = bpf_map_lookup_elem(&kpr_ct_prev, k);
	return ct;
}

static __always_inline void kpr_ct_delete(const struct kpr_ct_key *k, const struct kpr_config *cfg)
{
	bpf_map_delete_elem(&kpr_ct, k);
	if (kpr_migrating(cfg))
		bpf_map_delete_elem(&kpr_ct_prev, k);
}

/* A new flow's entry, written to the old map as well during a migration (best effort: a full LRU map evicts). */
static __always_inline void kpr_ct_mirror(const struct kpr_ct_key *k, const struct kpr_ct_val *v, const struct kpr_config *cfg)
{
	if (kpr_migrating(cfg))
		bpf_map_update_elem(&kpr_ct_prev, k, v, BPF_ANY);
}

/* Reverse NAT of a socket; only addr and port of the value are read. */
static __always_inline struct kpr_revnat_val *kpr_revnat_lookup(const struct kpr_revnat_key *k)
{
	struct kpr_revnat_val *rval = bpf_map_lookup_elem(&kpr_revnat, k);

	if (!rval && kpr_migrating(kpr_cfg()))
		rval = bpf_map_lookup_elem(&kpr_revnat_prev, k);
	return rval;
}

static __always_inline struct kpr_affinity_val *kpr_affinity_lookup(const struct kpr_affinity_key *k)
{
	struct kpr_affinity_val *aval = bpf_map_lookup_elem(&kpr_affinity, k);

	if (!aval && kpr_migrating(kpr_cfg()))
		aval = bpf_map_lookup_elem(&kpr_aff_prev, k);
	return aval;
}

#endif /* __KPR_MIGRATE_H */
