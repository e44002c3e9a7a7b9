// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Socket-level load balancing: a ClusterIP is translated once, when the
 * socket connects (TCP, connected UDP) or per datagram (unconnected UDP), so
 * established traffic pays nothing per packet and never needs conntrack.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/errno.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "kpr_types.h"
#include "kpr_maps.h"

#define SYS_REJECT 0
#define SYS_PROCEED 1

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline void kpr_count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&kpr_stats, &stat);

	if (v)
		*v += 1; /* per-CPU slot: no atomic needed */
}

static __always_inline bool kpr_proto_supported(__u32 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP;
}

static __always_inline struct kpr_svc4_val *
kpr4_lookup_service(__be32 addr, __be16 port, __u8 proto)
{
	struct kpr_svc4_key key = {
		.addr = addr,
		.port = port,
		.proto = proto,
		.scope = KPR_SCOPE_EXTERNAL,
	};

	return bpf_map_lookup_elem(&kpr_svc4, &key);
}

static __always_inline struct kpr_backend4 *
kpr4_select_backend(__be32 addr, __be16 port, __u8 proto, const struct kpr_svc4_val *svc)
{
	struct kpr_svc4_key key = {
		.addr = addr,
		.port = port,
		.proto = proto,
		.scope = KPR_SCOPE_EXTERNAL,
	};
	struct kpr_svc4_val *slot;

	/* Uniform random choice, as kube-proxy's statistic-mode rules. */
	key.slot = (bpf_get_prandom_u32() % svc->count) + 1;
	slot = bpf_map_lookup_elem(&kpr_svc4, &key);
	if (!slot)
		return NULL;
	return bpf_map_lookup_elem(&kpr_backend4, &slot->backend_id);
}

/*
 * Translate ctx's destination if it is a service frontend.
 * Returns 0 when translated or not a service, -EHOSTUNREACH when the service
 * has no backend (the caller must be refused at once, as kube-proxy's REJECT),
 * -ENOENT when a slot or backend vanished underneath us.
 */
static __always_inline int kpr4_xlate_fwd(struct bpf_sock_addr *ctx, __u32 stat)
{
	__be32 daddr = ctx->user_ip4;
	__be16 dport = (__be16)ctx->user_port;
	__u8 proto = (__u8)ctx->protocol;
	struct kpr_revnat4_key rkey = {};
	struct kpr_revnat4_val rval = {};
	struct kpr_svc4_val *svc;
	struct kpr_backend4 *be;

	if (!kpr_proto_supported(ctx->protocol))
		return 0;
	svc = kpr4_lookup_service(daddr, dport, proto);
	if (!svc)
		return 0;
	if (svc->count == 0) {
		kpr_count(KPR_STAT_NO_BACKEND);
		return -EHOSTUNREACH;
	}
	be = kpr4_select_backend(daddr, dport, proto, svc);
	if (!be) {
		kpr_count(KPR_STAT_BACKEND_MISSING);
		return -ENOENT;
	}

	rkey.cookie = bpf_get_socket_cookie(ctx);
	rkey.addr = be->addr;
	rkey.port = be->port;
	rval.addr = daddr;
	rval.port = dport;
	rval.rev_nat_id = svc->rev_nat_id;
	/* Best effort: a full LRU evicts an old socket's entry, never fails us. */
	bpf_map_update_elem(&kpr_revnat4, &rkey, &rval, BPF_ANY);

	ctx->user_ip4 = be->addr;
	ctx->user_port = be->port;
	kpr_count(stat);
	return 0;
}

static __always_inline void kpr4_xlate_rev(struct bpf_sock_addr *ctx, __u32 stat)
{
	struct kpr_revnat4_key rkey = {};
	struct kpr_revnat4_val *rval;

	if (!kpr_proto_supported(ctx->protocol))
		return;
	rkey.cookie = bpf_get_socket_cookie(ctx);
	rkey.addr = ctx->user_ip4;
	rkey.port = (__be16)ctx->user_port;
	rval = bpf_map_lookup_elem(&kpr_revnat4, &rkey);
	if (!rval)
		return;
	ctx->user_ip4 = rval->addr;
	ctx->user_port = rval->port;
	kpr_count(stat);
}

static __always_inline int kpr_verdict(int err)
{
	/* A vanished backend is a race with the agent, not a refusal. */
	return err == -EHOSTUNREACH ? SYS_REJECT : SYS_PROCEED;
}

SEC("cgroup/connect4")
int kpr_connect4(struct bpf_sock_addr *ctx)
{
	return kpr_verdict(kpr4_xlate_fwd(ctx, KPR_STAT_CONNECT4_XLATE));
}

SEC("cgroup/sendmsg4")
int kpr_sendmsg4(struct bpf_sock_addr *ctx)
{
	return kpr_verdict(kpr4_xlate_fwd(ctx, KPR_STAT_SENDMSG4_XLATE));
}

SEC("cgroup/recvmsg4")
int kpr_recvmsg4(struct bpf_sock_addr *ctx)
{
	kpr4_xlate_rev(ctx, KPR_STAT_RECVMSG4_XLATE);
	return SYS_PROCEED;
}

SEC("cgroup/getpeername4")
int kpr_getpeername4(struct bpf_sock_addr *ctx)
{
	kpr4_xlate_rev(ctx, KPR_STAT_GETPEERNAME4_XLATE);
	return SYS_PROCEED;
}
