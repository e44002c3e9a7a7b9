/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Forwarding for the tc path: where a rewritten packet goes. Every packet
 * kpr translated leaves through a FIB lookup and a redirect, so it never
 * meets the stack's martian-source checks or netfilter with addresses the
 * stack did not choose. Apart from NAT because a new way out (DSR's
 * encapsulation, XDP's XDP_TX) changes this and not the rewrite.
 */
#ifndef __KPR_FORWARD_H
#define __KPR_FORWARD_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "kpr_types.h"
#include "kpr_addr.h"

/*
 * Sends a rewritten packet on its way: FIB lookup for the new destination,
 * then a redirect with the right L2 addresses. When the FIB cannot decide
 * (local destination, no route), the stack gets the packet as it is now.
 */
static __always_inline int kpr_forward(struct __sk_buff *skb, const struct kpr_ct_val *ct, __u8 family, __u8 proto)
{
	struct bpf_fib_lookup fib = {};
	long rc;

	fib.family = family;
	fib.l4_protocol = proto;
	fib.sport = ct->nat_sport;
	fib.dport = ct->nat_dport;
	fib.tot_len = skb->len - sizeof(struct ethhdr);
	fib.ifindex = skb->ingress_ifindex;
	if (family == AF_INET) {
		fib.ipv4_src = ct->nat_saddr[3];
		fib.ipv4_dst = ct->nat_daddr[3];
	} else {
		kpr_addr_copy(fib.ipv6_src, ct->nat_saddr);
		kpr_addr_copy(fib.ipv6_dst, ct->nat_daddr);
	}
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		if (bpf_skb_store_bytes(skb, 0, fib.dmac, ETH_ALEN, 0) ||
		    bpf_skb_store_bytes(skb, ETH_ALEN, fib.smac, ETH_ALEN, 0))
			return TC_ACT_SHOT;
		return bpf_redirect(fib.ifindex, 0);
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib.ifindex, NULL, 0, 0);
	/* Translated, so kpr's: the chain ends here, as it does for a redirect. */
	return TC_ACT_OK;
}

#endif /* __KPR_FORWARD_H */
