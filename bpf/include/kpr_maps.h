/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Every map kpr programs share. Every object that includes this header gets
 * the same definitions, and the agent pins them by name, so two objects
 * loaded with the same pin directory share one kernel map each.
 */
#ifndef __KPR_MAPS_H
#define __KPR_MAPS_H

#include <bpf/bpf_helpers.h>
#include "kpr_types.h"
#include "kpr_event.h"

/* Compiled defaults: the agent sets the sizes at load (agent/datapath/map-sizes.ts). */
#define KPR_SVC_MAP_MAX 262144
#define KPR_BACKEND_MAP_MAX 262144
#define KPR_REVNAT_MAP_MAX 262144
#define KPR_VIP_MAP_MAX 65536
#define KPR_AFFINITY_MAP_MAX 65536
#define KPR_TERM_MAP_MAX 4096
#define KPR_CT_MAP_MAX 262144
#define KPR_SRC_RANGE_MAP_MAX 16384
/* ServiceCIDR allows two CIDRs per object; a cluster has a handful of objects. */
#define KPR_SVC_CIDR_MAP_MAX 256
/* Maglev table chunks (2 KiB each, preallocated) and table references (one per Maglev entry set). */
#define KPR_MAGLEV_MAP_MAX 4096
#define KPR_MAGLEV_REF_MAP_MAX 131072
/* Every frontend id (kpr_svc_val.frontend_id; layout v1 and older releases named it rev_nat_id): ids are allocated lowest first, so all are dense below the frontend count. */
#define KPR_SVC_STATS_MAX 65536
/* Bytes; 104 per record (struct kpr_event and its 8-byte header): about 2,500 events between two reads. */
#define KPR_EVENTS_RING_SIZE (256 * 1024)

/* Frontend slot -> master entry or backend id (see struct kpr_svc_key). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPR_SVC_MAP_MAX);
	__type(key, struct kpr_svc_key);
	__type(value, struct kpr_svc_val);
} kpr_svc SEC(".maps");

/* Backend id -> address. Ids are small and reused, so lookups stay cheap. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPR_BACKEND_MAP_MAX);
	__type(key, __u32);
	__type(value, struct kpr_backend);
} kpr_backend SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPR_VIP_MAP_MAX);
	__type(key, struct kpr_vip_key);
	__type(value, struct kpr_vip_val);
} kpr_vip SEC(".maps");

/* LRU: entries of closed sockets age out without the agent's help. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KPR_REVNAT_MAP_MAX);
	__type(key, struct kpr_revnat_key);
	__type(value, struct kpr_revnat_val);
} kpr_revnat SEC(".maps");

/* LRU: idle clients age out; the timeout itself is checked on use. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KPR_AFFINITY_MAP_MAX);
	__type(key, struct kpr_affinity_key);
	__type(value, struct kpr_affinity_val);
} kpr_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPR_BACKEND_MAP_MAX);
	__type(key, struct kpr_affinity_match_key);
	__type(value, __u8);
} kpr_aff_match SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPR_TERM_MAP_MAX);
	__type(key, struct kpr_term_key);
	__type(value, __u8);
} kpr_term SEC(".maps");

/* LRU: a full table evicts the oldest flows instead of refusing new ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KPR_CT_MAP_MAX);
	__type(key, struct kpr_ct_key);
	__type(value, struct kpr_ct_val);
} kpr_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, KPR_SRC_RANGE_MAP_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct kpr_src_range_key);
	__type(value, __u8);
} kpr_src_range SEC(".maps");

/*
 * Maglev tables, KPR_MAGLEV_CHUNK entries an element (struct
 * kpr_maglev_chunk). Preallocated, as kpr_svc: an element costs exactly its
 * 2 KiB and a key (plus the kernel's element header, 48 bytes), where an
 * element allocated on insert would be rounded up to the allocator's 4 KiB
 * class; the agent sizes it at load (--map-size-maglev).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPR_MAGLEV_MAP_MAX);
	__type(key, struct kpr_maglev_key);
	__type(value, struct kpr_maglev_chunk);
} kpr_maglev SEC(".maps");

/* (frontend id, scope) -> its Maglev table; allocated on insert (64 bytes an entry set). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPR_MAGLEV_REF_MAP_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct kpr_maglev_ref_key);
	__type(value, struct kpr_maglev_ref);
} kpr_maglev_ref SEC(".maps");

/* The service ranges (struct kpr_svc_cidr_key); read through kpr_svc_cidr.h. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, KPR_SVC_CIDR_MAP_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct kpr_svc_cidr_key);
	__type(value, __u8);
} kpr_svc_cidr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kpr_config);
} kpr_config SEC(".maps");

/*
 * kpr_svc_meta's elements are allocated on insert: memory follows the
 * frontends that exist, not the id space (196 bytes a name since layout v2).
 * Layout v1 preallocated; its test fixture says so.
 */
#ifndef KPR_SVC_META_MAP_FLAGS
#define KPR_SVC_META_MAP_FLAGS BPF_F_NO_PREALLOC
#endif

/* frontend_id -> what it stands for (read by the CLI only). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KPR_VIP_MAP_MAX);
	__uint(map_flags, KPR_SVC_META_MAP_FLAGS);
	__type(key, __u32);
	__type(value, struct kpr_svc_meta);
} kpr_svc_meta SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KPR_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} kpr_stats SEC(".maps");

/* Per-frontend counters by frontend_id (struct kpr_svc_stat); read by the agent's metrics and the CLI. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KPR_SVC_STATS_MAX);
	__type(key, __u32);
	__type(value, struct kpr_svc_stat);
} kpr_svc_stats SEC(".maps");

/* kpr monitor's switch (struct kpr_monitor), written by the CLI only; see kpr_monitor.h. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kpr_monitor);
} kpr_monitor SEC(".maps");

/* kpr monitor's events (struct kpr_event), while the switch is on. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, KPR_EVENTS_RING_SIZE);
} kpr_events SEC(".maps");

#endif /* __KPR_MAPS_H */
