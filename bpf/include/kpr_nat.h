/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT for the tc path: the packet rewrite a conntrack entry describes
 * (addresses and ports, with the L3 and L4 checksums kept right
 * incrementally), and the choice of the source a SNATed flow leaves with.
 * The rewrite knows nothing of why it rewrites (new flow, known flow or
 * reply: kpr_tc.bpf.c decides), and the SNAT port search itself, with its
 * collision checks, is kpr_snat.h's: this header is where the two meet a
 * parsed packet (kpr_parse.h).
 */
#ifndef __KPR_NAT_H
#define __KPR_NAT_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <stdbool.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>

#include "kpr_types.h"
#include "kpr_addr.h"
#include "kpr_parse.h"
#include "kpr_snat.h"

/* Rewrites one address (source or destination), checksums included. */
static __always_inline int kpr_set_addr(struct __sk_buff *skb, const struct kpr_pkt *p,
					const __be32 *old, const __be32 *new, bool src)
{
	__u64 l4_flags = BPF_F_PSEUDO_HDR | (p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0);

	if (kpr_addr_eq(old, new))
		return 0;
	if (p->family == AF_INET) {
		__u32 off = p->l3_off + (src ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr));

		if (bpf_l4_csum_replace(skb, p->csum_off, old[3], new[3], l4_flags | 4))
			return -1;
		if (bpf_l3_csum_replace(skb, p->l3_off + offsetof(struct iphdr, check), old[3], new[3], 4))
			return -1;
		return bpf_skb_store_bytes(skb, off, &new[3], 4, 0);
	} else {
		__u32 off = p->l3_off + (src ? offsetof(struct ipv6hdr, saddr) : offsetof(struct ipv6hdr, daddr));
		__s64 diff = bpf_csum_diff((__be32 *)old, 16, (__be32 *)new, 16, 0);

		if (diff < 0 || bpf_l4_csum_replace(skb, p->csum_off, 0, diff, l4_flags))
			return -1;
		return bpf_skb_store_bytes(skb, off, new, 16, 0);
	}
}

static __always_inline int kpr_set_port(struct __sk_buff *skb, const struct kpr_pkt *p,
					__be16 old, __be16 new, bool src)
{
	__u64 l4_flags = p->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 off = p->l4_off + (src ? 0 : 2); /* source and dest ports lead both headers */

	if (old == new)
		return 0;
	if (bpf_l4_csum_replace(skb, p->csum_off, old, new, l4_flags | 2))
		return -1;
	return bpf_skb_store_bytes(skb, off, &new, 2, 0);
}

/* Applies a conntrack entry's rewrite to the packet. */
static __always_inline int kpr_rewrite(struct __sk_buff *skb, const struct kpr_pkt *p, const struct kpr_ct_val *ct)
{
	if (kpr_set_addr(skb, p, p->saddr, ct->nat_saddr, true) ||
	    kpr_set_addr(skb, p, p->daddr, ct->nat_daddr, false) ||
	    kpr_set_port(skb, p, p->sport, ct->nat_sport, true) ||
	    kpr_set_port(skb, p, p->dport, ct->nat_dport, false))
		return -1;
	return 0;
}

/*
 * Chooses the source a new flow leaves with: the node address and a port of
 * kpr's SNAT range that neither the node's sockets nor another kpr flow
 * hold towards the backend (kpr_snat.h).
 */
static __always_inline int kpr_pick_snat(struct __sk_buff *skb, const struct kpr_pkt *p, const struct kpr_backend *be,
					 const struct kpr_config *cfg, struct kpr_ct_val *fwd, __u64 now)
{
	if (!cfg)
		return -1;
	kpr_addr_copy(fwd->nat_saddr, p->family == AF_INET ? cfg->snat_v4 : cfg->snat_v6);
	if (kpr_addr_is_zero(fwd->nat_saddr))
		return -1;
	fwd->nat_sport = kpr_snat_pick_port(skb, cfg, p->family, p->proto, p->saddr, p->sport, be->addr, be->port, fwd->nat_saddr, now);
	return fwd->nat_sport ? 0 : -1;
}

#endif /* __KPR_NAT_H */
