/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The source port of a flow the tc path SNATs to a node address
 * (docs/semantics.md, rule 37).
 *
 * netfilter's masquerade cannot collide with the node's own connections: one
 * conntrack table holds both. kpr's tc conntrack (kpr_ct) does not see the
 * node's sockets, so a SNAT port chosen blindly can be the very port a node
 * process uses towards the same backend; the backend then takes the node's
 * SYN for the SNATed flow's, and kpr hands its answer to the external
 * client. So kpr SNATs only to ports of its own range (enum kpr_snat_ports),
 * which the agent reserves from the node's ephemeral ports
 * (net.ipv4.ip_local_reserved_ports: the node never autobinds there), and
 * it skips a candidate a node socket holds all the same (a process may bind
 * a reserved port explicitly) or another kpr flow holds towards the same
 * backend.
 *
 * Candidates: the first is a hash of the client's address and port, so a
 * client reusing its port after a close gets the same SNAT port, and the
 * backend's TIME_WAIT for the old connection accepts the new SYN as it
 * would from that client directly. The others are random: a client whose
 * first candidate is busy gets fresh ones on each SYN retransmission
 * instead of the same busy set. KPR_SNAT_PORT_TRIES bounds the work per new
 * flow and the verifier's: each try is walked once per state that reaches
 * it, about 7,000 processed instructions per try in kpr_tc_ext on 6.18
 * (kpr_tc_ext 59k with 4 tries, 91k with 8; kpr_tc_pod 92k and 141k; the
 * earlier kpr_ct-only picker took 32k and 52k).
 * All of them busy: the client's own port, checked the same way (the last
 * try, counted in KPR_STAT_TC_SNAT_EXHAUSTED); that busy too: the flow is dropped, counted and reported (kpr_tc.bpf.c:
 * KPR_STAT_TC_DROP_NO_SNAT_PORT, KPR_EV_NO_SNAT_PORT), never sent with a
 * port that may collide; the client's retransmission tries again.
 */
#ifndef __KPR_SNAT_H
#define __KPR_SNAT_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "kpr_types.h"
#include "kpr_addr.h"
#include "kpr_common.h"
#include "kpr_migrate.h"

#define KPR_SNAT_PORT_SPAN (KPR_SNAT_PORT_MAX - KPR_SNAT_PORT_MIN + 1)
#define KPR_SNAT_PORT_TRIES 16

/* A 32-bit mix of the client's address and port (murmur3's finaliser per word): the first candidate. */
static __always_inline __u32 kpr_snat_hash(const __be32 *client, __be16 client_port)
{
	__u32 h = 0x9e3779b9 ^ (__u32)client_port;
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		h ^= client[i];
		h *= 0xcc9e2d51;
		h = (h << 15) | (h >> 17);
		h *= 0x1b873593;
	}
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	return h;
}

/* A port of kpr's range, in network order. */
static __always_inline __be16 kpr_snat_port_of(__u32 n)
{
	return bpf_htons((__u16)(KPR_SNAT_PORT_MIN + n % KPR_SNAT_PORT_SPAN));
}

/*
 * True when a node socket holds the candidate port towards the backend: a
 * TCP connection (any state, TIME_WAIT and request sockets included, hence
 * the skc_ lookup) or listener, a UDP socket bound to it. `tuple` is the
 * backend's answer to the node (source the backend, destination the SNAT
 * address and the candidate port); the lookup is in the network namespace of the
 * packet's device: the node's. `v4` and `tcp` are constants at each call
 * site, so each copy has one helper call and no branch on them.
 */
static __always_inline bool kpr_snat_node_holds(struct __sk_buff *skb, struct bpf_sock_tuple *tuple, const bool v4, const bool tcp)
{
	struct bpf_sock *sk;
	__u32 size = v4 ? sizeof(tuple->ipv4) : sizeof(tuple->ipv6);

	if (tcp)
		sk = bpf_skc_lookup_tcp(skb, tuple, size, BPF_F_CURRENT_NETNS, 0);
	else
		sk = bpf_sk_lookup_udp(skb, tuple, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return false;
	bpf_sk_release(sk);
	return true;
}

/* The candidate loop, for one family and protocol (constants: see kpr_snat_node_holds). */
static __always_inline __be16 kpr_snat_probe(struct __sk_buff *skb, const struct kpr_config *cfg, struct kpr_ct_key *rkey,
					     struct bpf_sock_tuple *tuple, __be16 first, __be16 overflow, __u64 now, const bool v4, const bool tcp)
{
	struct kpr_ct_val *held;
	__be16 port = first;
	int i;

	for (i = 0; i < KPR_SNAT_PORT_TRIES; i++) {
		if (i > 0)
			port = kpr_snat_port_of(bpf_get_prandom_u32());
		/*
		 * Both keys take the candidate before either lookup: the paths
		 * that skip it then leave the same stack behind, and the
		 * verifier prunes them at the next iteration instead of
		 * walking every combination of skips.
		 */
		rkey->dport = port;
		if (v4)
			tuple->ipv4.dport = port;
		else
			tuple->ipv6.dport = port;
		/*
		 * An expired entry the sweeper has not removed yet holds nothing:
		 * its flow is over, and the new flow's entries replace it. Counting
		 * it as taken filled the range with dead flows between sweeps.
		 */
		held = kpr_ct_lookup(rkey, cfg);
		if (held && held->expires_ns > now) {
			kpr_count(KPR_STAT_TC_SNAT_SKIP_CONNTRACK);
			continue;
		}
		if (kpr_snat_node_holds(skb, tuple, v4, tcp)) {
			kpr_count(KPR_STAT_TC_SNAT_SKIP_NODE_SOCKET);
			continue;
		}
		return port;
	}
	/*
	 * Every candidate of the range taken (a flood of new flows to one
	 * backend: the range holds 4,536 at once): the client's own port, as
	 * before kpr had a range, checked like the others. Only a node
	 * connection that autobinds that very port to the same backend later
	 * can collide with it. The check is written out again rather than
	 * shared with the loop through a helper: that shape cost the verifier
	 * 18-25% more (kpr_tc_ext 220k -> 260k processed instructions on 6.18).
	 */
	kpr_count(KPR_STAT_TC_SNAT_EXHAUSTED);
	rkey->dport = overflow;
	if (v4)
		tuple->ipv4.dport = overflow;
	else
		tuple->ipv6.dport = overflow;
	held = kpr_ct_lookup(rkey, cfg);
	if ((held && held->expires_ns > now) || kpr_snat_node_holds(skb, tuple, v4, tcp))
		return 0;
	return overflow;
}

/*
 * A free SNAT port (network order) for the flow of `client`:`client_port`
 * towards the backend be_addr:be_port, leaving as snat_addr: a port of the
 * range, else the client's own (the range exhausted: KPR_STAT_TC_SNAT_EXHAUSTED);
 * 0 when that is taken too. Each skipped
 * candidate counts once, by what held it: another kpr flow (the REPLY
 * tuple is in kpr_ct) or a node socket.
 */
static __always_inline __be16 kpr_snat_pick_port(struct __sk_buff *skb, const struct kpr_config *cfg, __u8 family, __u8 proto,
						 const __be32 *client, __be16 client_port,
						 const __be32 *be_addr, __be16 be_port, const __be32 *snat_addr, __u64 now)
{
	struct bpf_sock_tuple tuple;
	struct kpr_ct_key rkey;
	__be16 first = kpr_snat_port_of(kpr_snat_hash(client, client_port));
	__be16 port;

	__builtin_memset(&rkey, 0, sizeof(rkey));
	kpr_addr_copy(rkey.saddr, be_addr);
	kpr_addr_copy(rkey.daddr, snat_addr);
	rkey.sport = be_port;
	rkey.proto = proto;
	rkey.dir = KPR_CT_DIR_REPLY;
	__builtin_memset(&tuple, 0, sizeof(tuple));
	if (family == AF_INET) {
		tuple.ipv4.saddr = be_addr[3];
		tuple.ipv4.daddr = snat_addr[3];
		tuple.ipv4.sport = be_port;
		port = proto == IPPROTO_TCP ? kpr_snat_probe(skb, cfg, &rkey, &tuple, first, client_port, now, true, true)
					    : kpr_snat_probe(skb, cfg, &rkey, &tuple, first, client_port, now, true, false);
	} else {
		kpr_addr_copy(tuple.ipv6.saddr, be_addr);
		kpr_addr_copy(tuple.ipv6.daddr, snat_addr);
		tuple.ipv6.sport = be_port;
		port = proto == IPPROTO_TCP ? kpr_snat_probe(skb, cfg, &rkey, &tuple, first, client_port, now, false, true)
					    : kpr_snat_probe(skb, cfg, &rkey, &tuple, first, client_port, now, false, false);
	}
	return port;
}

#endif /* __KPR_SNAT_H */
