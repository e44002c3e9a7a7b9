/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Unallocated service addresses (docs/semantics.md rule 33). An address
 * inside one of the cluster's service ranges (kpr_svc_cidr) that no Service's
 * ClusterIP holds (no kpr_vip entry) has nowhere to go: left alone it would
 * follow the node's default route out of the cluster. kube-proxy's nftables
 * mode drops such traffic ("Drop traffic to unallocated ClusterIPs"); kpr
 * refuses it on the socket path, as its other refusals, and drops it on the
 * tc path. Called only after the frontend lookup missed, so an allocated
 * ClusterIP on a port no Service defines keeps its own rule (kpr_vip's
 * REFUSE_UNKNOWN_PORT on the socket path, untouched on the tc path).
 * With no range known the trie is empty and the lookup misses at once.
 */
#ifndef __KPR_SVC_CIDR_H
#define __KPR_SVC_CIDR_H

#include "kpr_maps.h"
#include "kpr_addr.h"
#include "kpr_common.h"
#include "kpr_monitor.h"

/* True when `addr` (16 bytes, IPv4-mapped) is in a service range and no ClusterIP. */
static __always_inline bool kpr_svc_cidr_unallocated(const __be32 *addr)
{
	struct kpr_svc_cidr_key k = {};
	struct kpr_vip_key vkey = {};

	k.prefixlen = 128;
	kpr_addr_copy(k.addr, addr);
	if (!bpf_map_lookup_elem(&kpr_svc_cidr, &k))
		return false;
	kpr_addr_copy(vkey.addr, addr);
	return bpf_map_lookup_elem(&kpr_vip, &vkey) == NULL;
}

/*
 * Socket path, after the frontend and kpr_vip lookups missed: true when the
 * call must be refused (counted, one kpr monitor event). `key`: the lookup's.
 */
static __always_inline bool kpr_svc_cidr_refuse_sock(void *ctx, const struct kpr_svc_key *key, __u8 hook)
{
	if (!kpr_svc_cidr_unallocated(key->addr))
		return false;
	kpr_count(KPR_STAT_UNALLOCATED_REFUSED);
	kpr_emit(ctx, hook, KPR_EV_UNALLOCATED, 0, key, NULL, NULL, 0, NULL, 0, 0);
	return true;
}

/*
 * tc path, after the frontend lookup missed for a new flow: true when the
 * packet must be dropped (counted, one kpr monitor event).
 */
static __always_inline bool kpr_svc_cidr_drop_tc(struct __sk_buff *skb, const struct kpr_svc_key *key, __u8 hook,
						 const __be32 *client, __be16 client_port, __u8 family)
{
	if (!kpr_svc_cidr_unallocated(key->addr))
		return false;
	kpr_count(KPR_STAT_TC_DROP_UNALLOCATED);
	kpr_emit(skb, hook, KPR_EV_UNALLOCATED, 0, key, NULL, NULL, 0, client, client_port, family);
	return true;
}

#endif /* __KPR_SVC_CIDR_H */
