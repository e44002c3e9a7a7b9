/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Small helpers every kpr program uses. Include after kpr_maps.h. */
#ifndef __KPR_COMMON_H
#define __KPR_COMMON_H

#include "kpr_maps.h"

static __always_inline void kpr_count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&kpr_stats, &stat);

	if (v)
		*v += 1; /* per-CPU slot: no atomic needed */
}

static __always_inline void kpr_addr_copy(__be32 *dst, const __be32 *src)
{
	dst[0] = src[0];
	dst[1] = src[1];
	dst[2] = src[2];
	dst[3] = src[3];
}

static __always_inline bool kpr_addr_eq(const __be32 *a, const __be32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

#endif /* __KPR_COMMON_H */
