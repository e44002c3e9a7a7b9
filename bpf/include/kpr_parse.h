/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Parsing for the tc path: what kpr reads of a packet before it decides
 * anything (struct kpr_pkt), and the only place that touches the headers to
 * read them. Kept apart from conntrack and NAT so that a new protocol (an
 * L4 header with ports, say) is one case in kpr_parse() and nothing else
 * here; the rewrite (kpr_nat.h) then only needs csum_off and l4_off.
 * Anything not fully parsed (fragments, IPv4 options beyond the header
 * length we read, IPv6 extension headers, truncated headers) is not ours
 * or malformed, and the tc program passes it untouched.
 */
#ifndef __KPR_PARSE_H
#define __KPR_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "kpr_addr.h"

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

struct kpr_pkt {
	__be32 saddr[4];
	__be32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u8 tcp_flags; /* KPR_TCP_FIN/SYN/RST for TCP */
	__u32 l3_off;
	__u32 l4_off;
	__u32 csum_off; /* offset of the L4 checksum */
};

/*
 * SCTP's common header (RFC 9260 3.1). Parsed only so that a new SCTP flow to
 * a frontend is dropped and counted (kpr_sctp in kpr_tc.bpf.c), never
 * rewritten: the CRC32c covers the ports, and tc cannot tell a packet that
 * carries its CRC from one whose CRC is still to be filled in
 * (CHECKSUM_PARTIAL, as a pod's packets cross a veth), so no rewrite is
 * correct for both.
 */
struct kpr_sctphdr {
	__be16 source;
	__be16 dest;
	__be32 vtag;
	__le32 checksum;
};

#define KPR_NOT_OURS 1 /* not IP, or not TCP/UDP/SCTP: nothing kpr handles */
#define KPR_MALFORMED 2 /* claims to be IP TCP/UDP/SCTP but cannot be parsed safely */

/* Returns 0 when the packet is TCP, UDP or SCTP we can read safely, KPR_NOT_OURS or KPR_MALFORMED otherwise. */
static __always_inline int kpr_parse(struct __sk_buff *skb, struct kpr_pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u32 l4_off;
	__u8 proto;

	if ((void *)(eth + 1) > data_end)
		return KPR_MALFORMED;
	p->l3_off = sizeof(*eth);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			return KPR_MALFORMED;
		if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
			return KPR_MALFORMED; /* fragments carry no ports to translate by */
		p->family = AF_INET;
		kpr_addr_from_v4(p->saddr, ip->saddr);
		kpr_addr_from_v4(p->daddr, ip->daddr);
		proto = ip->protocol;
		l4_off = p->l3_off + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > data_end)
			return KPR_MALFORMED;
		p->family = AF_INET6;
		kpr_addr_copy(p->saddr, ip6->saddr.in6_u.u6_addr32);
		kpr_addr_copy(p->daddr, ip6->daddr.in6_u.u6_addr32);
		proto = ip6->nexthdr; /* extension headers are not followed */
		l4_off = p->l3_off + sizeof(*ip6);
	} else {
		return KPR_NOT_OURS;
	}

	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = data + l4_off;

		if ((void *)(tcp + 1) > data_end)
			return KPR_MALFORMED;
		p->sport = tcp->source;
		p->dport = tcp->dest;
		p->tcp_flags = (tcp->fin ? KPR_TCP_FIN : 0) | (tcp->syn ? KPR_TCP_SYN : 0) | (tcp->rst ? KPR_TCP_RST : 0);
		p->csum_off = l4_off + offsetof(struct tcphdr, check);
	} else if (proto == IPPROTO_UDP) {
		struct udphdr *udp = data + l4_off;

		if ((void *)(udp + 1) > data_end)
			return KPR_MALFORMED;
		p->sport = udp->source;
		p->dport = udp->dest;
		p->tcp_flags = 0;
		p->csum_off = l4_off + offsetof(struct udphdr, check);
	} else if (proto == IPPROTO_SCTP) {
		struct kpr_sctphdr *sctp = data + l4_off;

		if ((void *)(sctp + 1) > data_end)
			return KPR_MALFORMED;
		p->sport = sctp->source;
		p->dport = sctp->dest;
		p->tcp_flags = 0;
		p->csum_off = l4_off + offsetof(struct kpr_sctphdr, checksum); /* never rewritten */
	} else {
		return KPR_NOT_OURS;
	}
	p->proto = proto;
	p->l4_off = l4_off;
	return 0;
}

#endif /* __KPR_PARSE_H */
