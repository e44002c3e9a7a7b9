// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Connected UDP sockets keep the backend chosen at connect() for their whole
 * life: a DNS client that connected through a ClusterIP would keep sending to
 * a pod that is gone. When UDP backends leave, the agent lists them in
 * kpr_term (with the frontend they left) and runs this iterator in each
 * network namespace; it destroys the sockets the socket hooks connected to
 * those backends through that frontend (the application sees
 * an error and reconnects, getting a live backend). Needs bpf_sock_destroy
 * (kernel 6.5+).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "kpr_types.h"
#include "kpr_maps.h"
#include "kpr_addr.h"
#include "kpr_common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

int bpf_sock_destroy(struct sock_common *sk) __ksym;

SEC("iter/udp")
int kpr_sock_term(struct bpf_iter__udp *ctx)
{
	struct udp_sock *udp_sk = ctx->udp_sk;
	struct kpr_revnat_key rkey = {};
	struct kpr_revnat_val *rval;
	struct kpr_term_key tkey = {};
	struct sock_common *skc;
	struct sock *sk;

	if (!udp_sk)
		return 0;
	sk = &udp_sk->inet.sk;
	skc = &sk->__sk_common;
	if (skc->skc_family == AF_INET) {
		kpr_addr_from_v4(tkey.addr, skc->skc_daddr);
	} else if (skc->skc_family == AF_INET6) {
		kpr_addr_copy(tkey.addr, skc->skc_v6_daddr.in6_u.u6_addr32);
	} else {
		return 0;
	}
	tkey.port = skc->skc_dport;
	tkey.proto = IPPROTO_UDP;

	/* Only sockets kpr translated, and only for the frontend the backend left. */
	rkey.cookie = bpf_get_socket_cookie(sk);
	kpr_addr_copy(rkey.addr, tkey.addr);
	rkey.port = tkey.port;
	rval = bpf_map_lookup_elem(&kpr_revnat, &rkey);
	if (!rval)
		return 0;
	tkey.frontend_id = rval->frontend_id;
	if (!bpf_map_lookup_elem(&kpr_term, &tkey))
		return 0;

	if (bpf_sock_destroy(skc) == 0)
		kpr_count(KPR_STAT_SOCK_DESTROYED);
	return 0;
}
