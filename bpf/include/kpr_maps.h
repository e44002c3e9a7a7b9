/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every map kpr programs share. Sizes are the agent's capacity limits. */
#ifndef __KPR_MAPS_H
#define __KPR_MAPS_H

#include <bpf/bpf_helpers.h>
#include "kpr_types.h"

#define KPR_SVC_MAP_MAX 262144
#define KPR_BACKEND_MAP_MAX 262144
#define KPR_REVNAT_MAP_MAX 262144

/* Frontend slot -> master entry or backend id (see struct kpr_svc4_key). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPR_SVC_MAP_MAX);
	__type(key, struct kpr_svc4_key);
	__type(value, struct kpr_svc4_val);
} kpr_svc4 SEC(".maps");

/* Backend id -> address. Ids are small and reused, so lookups stay cheap. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPR_BACKEND_MAP_MAX);
	__type(key, __u32);
	__type(value, struct kpr_backend4);
} kpr_backend4 SEC(".maps");

/* LRU: entries of closed sockets age out without the agent's help. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KPR_REVNAT_MAP_MAX);
	__type(key, struct kpr_revnat4_key);
	__type(value, struct kpr_revnat4_val);
} kpr_revnat4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KPR_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} kpr_stats SEC(".maps");

#endif /* __KPR_MAPS_H */
