/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Small helpers every kpr program uses (address helpers: kpr_addr.h). */
#ifndef __KPR_COMMON_H
#define __KPR_COMMON_H

#include "kpr_maps.h"
#include "kpr_addr.h"

static __always_inline void kpr_count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&kpr_stats, &stat);

	if (v)
		*v += 1; /* per-CPU slot: no atomic needed */
}

static __always_inline struct kpr_config *kpr_cfg(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&kpr_config, &zero);
}

/* The per-CPU counters of a frontend, or NULL when they are turned off. */
static __always_inline struct kpr_svc_stat *kpr_svc_stat_of(const struct kpr_config *cfg, __u32 id)
{
	if (cfg && (cfg->flags & KPR_CFG_F_NO_SVC_STATS))
		return NULL;
	return bpf_map_lookup_elem(&kpr_svc_stats, &id);
}

#endif /* __KPR_COMMON_H */
