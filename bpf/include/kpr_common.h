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

#endif /* __KPR_COMMON_H */
