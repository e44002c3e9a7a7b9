// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Socket-level load balancing: a service address is translated once, when the
 * socket connects (TCP, connected UDP) or per datagram (unconnected UDP), so
 * established traffic pays nothing per packet and never needs conntrack.
 * IPv4 and IPv6 hooks share one path over 16-byte addresses, kpr_xlate_fwd:
 * the pipeline of kpr_lb.h (lookup -> select) with the socket's translate.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/errno.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "kpr_types.h"
#include "kpr_maps.h"
#include "kpr_addr.h"
#include "kpr_common.h"
#include "kpr_lb.h"
#include "kpr_monitor.h"
#include "kpr_refuse.h"
#include "kpr_masq.h"
#include "kpr_svc_cidr.h"

#define SYS_REJECT 0
#define SYS_PROCEED 1

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* A destination in the form every map uses. */
struct kpr_dst {
	__be32 addr[4];
	__be16 port;
	__u8 proto;
};

/*
 * SCTP is translated like TCP wherever a hook sees it, but Linux runs none of
 * the connect or sendmsg hooks for SCTP sockets: sctp_inet_connect and
 * sctp_sendmsg call no cgroup program (true from 5.10 through 6.18; checked
 * on 5.10 with a probe, docs/semantics.md rule 39). Only getpeername runs for
 * them, and finds no translation to undo. SCTP to a service is the tc path's
 * (kpr_tc.bpf.c, kpr_sctp: dropped and counted).
 */
static __always_inline bool kpr_proto_supported(__u32 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP;
}

/*
 * In service-mesh mode the hooks serve only the node's own processes; pod
 * traffic is left to the tc path so a sidecar sees the ClusterIP it expects.
 */
static __always_inline bool kpr_sock_skip(struct bpf_sock_addr *ctx, const struct kpr_config *cfg)
{
	return cfg && (cfg->flags & KPR_CFG_F_SOCK_HOST_ONLY) &&
	       bpf_get_netns_cookie(ctx) != cfg->host_netns_cookie;
}

/*
 * Translates *dst if it is a service frontend. Returns 0 when translated or
 * not a service, -EHOSTUNREACH when the caller must be refused at once (no
 * backend, a service address on a port no Service defines, or an unallocated
 * address of a service range), -ENOENT when
 * a slot or backend vanished underneath us. Each outcome is one kpr monitor
 * event (`hook`: which program asks).
 */
/*
 * The flow Maglev hashes on the socket path: the socket's own address and
 * port, as far as it has them, and the destination. A socket has a source
 * port once bound (an explicit bind, or UDP's autobind before its first
 * datagram, so every sendmsg); before that (a plain TCP or connected-UDP
 * connect) there is nothing to keep consistent across nodes and the hook
 * returns false: the frontend's Maglev selection falls back to random
 * (KPR_STAT_MAGLEV_SOCK_UNBOUND; docs/semantics.md rule 40). The source
 * address is the one bound, zero when the socket is bound to any address.
 */
static __always_inline bool kpr_sock_flow(struct bpf_sock_addr *ctx, const struct kpr_dst *dst, __be32 *saddr,
					  struct kpr_flow *flow)
{
	struct bpf_sock *sk = ctx->sk;
	__u32 sport;

	if (!sk)
		return false;
	sport = sk->src_port;
	if (sport == 0 || sport > 0xffff)
		return false;
	if (sk->family == AF_INET) {
		__be32 v4 = sk->src_ip4;

		kpr_addr_from_v4(saddr, v4);
	} else {
		saddr[0] = sk->src_ip6[0];
		saddr[1] = sk->src_ip6[1];
		saddr[2] = sk->src_ip6[2];
		saddr[3] = sk->src_ip6[3];
	}
	flow->saddr = saddr;
	flow->daddr = dst->addr;
	flow->sport = bpf_htons((__u16)sport);
	flow->dport = dst->port;
	flow->proto = dst->proto;
	return true;
}

static __always_inline int kpr_xlate_fwd(struct bpf_sock_addr *ctx, struct kpr_dst *dst, __u32 stat_id, __u8 hook)
{
	struct kpr_flow flow = {};
	__be32 saddr[4] = {};
	struct kpr_affinity_key client = {};
	struct kpr_revnat_key rkey = {};
	struct kpr_revnat_val rval = {};
	struct kpr_svc_key key;
	struct kpr_svc_val *svc;
	struct kpr_config *cfg = kpr_cfg();
	struct kpr_svc_stat *stat;
	struct kpr_backend *be;
	__u32 backend_id = 0;
	__u64 now = 0;
	__u16 slot;
	__u8 ev_flags = 0;

	if (kpr_sock_skip(ctx, cfg))
		return 0;
	kpr_lb_svc_key_init(&key, dst->addr, dst->port, dst->proto);
	svc = kpr_lb_lookup_service(&key, true);
	if (!svc) {
		struct kpr_vip_key vkey = {};
		struct kpr_vip_val *vip;

		kpr_addr_copy(vkey.addr, dst->addr);
		vip = bpf_map_lookup_elem(&kpr_vip, &vkey);
		if (vip && (vip->flags & KPR_VIP_F_REFUSE_UNKNOWN_PORT)) {
			kpr_count(KPR_STAT_UNKNOWN_PORT);
			kpr_emit(ctx, hook, KPR_EV_UNKNOWN_PORT, 0, &key, NULL, NULL, 0, NULL, 0, 0);
			return -EHOSTUNREACH;
		}
		if (!vip && kpr_svc_cidr_refuse_sock(ctx, &key, hook))
			return -EHOSTUNREACH;
		return 0;
	}
	stat = kpr_svc_stat_of(cfg, svc->frontend_id);
	if (svc->count == 0) {
		kpr_count(KPR_STAT_NO_BACKEND);
		if (stat)
			stat->refused++;
		kpr_emit(ctx, hook, KPR_EV_NO_ENDPOINT, 0, &key, svc, NULL, 0, NULL, 0, 0);
		return -EHOSTUNREACH;
	}
	/* No client address at connect time: affinity is per network namespace. */
	if (kpr_lb_svc_has_affinity(svc)) {
		client.netns_cookie = bpf_get_netns_cookie(ctx);
		now = bpf_ktime_get_ns();
	}
	be = kpr_lb_select_backend(&key, svc, &client,
				   kpr_svc_algorithm(svc) == KPR_SVC_ALG_MAGLEV && kpr_sock_flow(ctx, dst, saddr, &flow) ? &flow : NULL,
				   now, &backend_id, &ev_flags, &slot);
	if (!be) {
		kpr_count(KPR_STAT_BACKEND_MISSING);
		kpr_emit(ctx, hook, KPR_EV_BACKEND_MISSING, ev_flags, &key, svc, NULL, backend_id, NULL, 0, 0);
		return -ENOENT;
	}
	/* kube-proxy would masquerade this pod's traffic: tc translates it instead (kpr_masq.h). */
	if (kpr_masq_sock_divert(ctx, cfg, svc, be)) {
		kpr_count(KPR_STAT_SOCK_MASQ_DIVERT);
		kpr_emit(ctx, hook, KPR_EV_MASQ_DIVERT, ev_flags, &key, svc, NULL, 0, NULL, 0, 0);
		return 0;
	}

	rkey.cookie = bpf_get_socket_cookie(ctx);
	kpr_addr_copy(rkey.addr, be->addr);
	rkey.port = be->port;
	kpr_addr_copy(rval.addr, dst->addr);
	rval.port = dst->port;
	rval.frontend_id = svc->frontend_id;
	/* Best effort: a full LRU evicts an old socket's entry, never fails us. */
	bpf_map_update_elem(&kpr_revnat, &rkey, &rval, BPF_ANY);
	kpr_emit(ctx, hook, KPR_EV_TRANSLATED, ev_flags, &key, svc, be, backend_id, NULL, 0, 0);

	kpr_addr_copy(dst->addr, be->addr);
	dst->port = be->port;
	kpr_count(stat_id);
	if (stat)
		stat->balanced++; /* per-CPU slot: no atomic needed */
	return 0;
}

/* Looks up what a socket really called; 0 and *dst rewritten if found. */
static __always_inline int kpr_xlate_rev(struct bpf_sock_addr *ctx, struct kpr_dst *dst, __u32 stat)
{
	struct kpr_revnat_key rkey = {};
	struct kpr_revnat_val *rval;

	rkey.cookie = bpf_get_socket_cookie(ctx);
	kpr_addr_copy(rkey.addr, dst->addr);
	rkey.port = dst->port;
	rval = kpr_revnat_lookup(&rkey);
	if (!rval)
		return -ENOENT;
	kpr_addr_copy(dst->addr, rval->addr);
	dst->port = rval->port;
	kpr_count(stat);
	return 0;
}

static __always_inline int kpr_verdict(int err)
{
	/* A vanished backend is a race with the agent, not a refusal. */
	return err == -EHOSTUNREACH ? kpr_sock_refuse() : SYS_PROCEED;
}

/* ---------------------------------------------------------------- IPv4 */

static __always_inline int kpr4_fwd(struct bpf_sock_addr *ctx, __u32 stat, __u8 hook)
{
	struct kpr_dst dst = {};
	int err;

	if (!kpr_proto_supported(ctx->protocol))
		return SYS_PROCEED;
	kpr_addr_from_v4(dst.addr, ctx->user_ip4);
	dst.port = (__be16)ctx->user_port;
	dst.proto = (__u8)ctx->protocol;
	err = kpr_xlate_fwd(ctx, &dst, stat, hook);
	if (err)
		return kpr_verdict(err);
	if (!kpr_addr_is_v4(dst.addr))
		return SYS_REJECT; /* an IPv4 socket cannot reach an IPv6 backend */
	ctx->user_ip4 = dst.addr[3];
	ctx->user_port = dst.port;
	return SYS_PROCEED;
}

static __always_inline void kpr4_rev(struct bpf_sock_addr *ctx, __u32 stat)
{
	struct kpr_dst dst = {};

	if (!kpr_proto_supported(ctx->protocol))
		return;
	kpr_addr_from_v4(dst.addr, ctx->user_ip4);
	dst.port = (__be16)ctx->user_port;
	if (kpr_xlate_rev(ctx, &dst, stat) == 0 && kpr_addr_is_v4(dst.addr)) {
		ctx->user_ip4 = dst.addr[3];
		ctx->user_port = dst.port;
	}
}

SEC("cgroup/connect4")
int kpr_connect4(struct bpf_sock_addr *ctx)
{
	return kpr4_fwd(ctx, KPR_STAT_CONNECT_XLATE, KPR_HOOK_CONNECT4);
}

SEC("cgroup/sendmsg4")
int kpr_sendmsg4(struct bpf_sock_addr *ctx)
{
	return kpr4_fwd(ctx, KPR_STAT_SENDMSG_XLATE, KPR_HOOK_SENDMSG4);
}

SEC("cgroup/recvmsg4")
int kpr_recvmsg4(struct bpf_sock_addr *ctx)
{
	kpr4_rev(ctx, KPR_STAT_RECVMSG_XLATE);
	return SYS_PROCEED;
}

SEC("cgroup/getpeername4")
int kpr_getpeername4(struct bpf_sock_addr *ctx)
{
	kpr4_rev(ctx, KPR_STAT_GETPEERNAME_XLATE);
	return SYS_PROCEED;
}

/* ---------------------------------------------------------------- IPv6 */

static __always_inline void kpr6_load(struct bpf_sock_addr *ctx, struct kpr_dst *dst)
{
	dst->addr[0] = ctx->user_ip6[0];
	dst->addr[1] = ctx->user_ip6[1];
	dst->addr[2] = ctx->user_ip6[2];
	dst->addr[3] = ctx->user_ip6[3];
	dst->port = (__be16)ctx->user_port;
}

static __always_inline void kpr6_store(struct bpf_sock_addr *ctx, const struct kpr_dst *dst)
{
	ctx->user_ip6[0] = dst->addr[0];
	ctx->user_ip6[1] = dst->addr[1];
	ctx->user_ip6[2] = dst->addr[2];
	ctx->user_ip6[3] = dst->addr[3];
	ctx->user_port = dst->port;
}

/*
 * An IPv6 socket may call an IPv4 service through an IPv4-mapped address;
 * the maps hold IPv4 as IPv4-mapped, so the same lookup serves it and the
 * backend comes back in the form the socket needs.
 */
static __always_inline int kpr6_fwd(struct bpf_sock_addr *ctx, __u32 stat, __u8 hook)
{
	struct kpr_dst dst = {};
	int err;

	if (!kpr_proto_supported(ctx->protocol))
		return SYS_PROCEED;
	kpr6_load(ctx, &dst);
	dst.proto = (__u8)ctx->protocol;
	err = kpr_xlate_fwd(ctx, &dst, stat, hook);
	if (err)
		return kpr_verdict(err);
	kpr6_store(ctx, &dst);
	return SYS_PROCEED;
}

static __always_inline void kpr6_rev(struct bpf_sock_addr *ctx, __u32 stat)
{
	struct kpr_dst dst = {};

	if (!kpr_proto_supported(ctx->protocol))
		return;
	kpr6_load(ctx, &dst);
	if (kpr_xlate_rev(ctx, &dst, stat) == 0)
		kpr6_store(ctx, &dst);
}

SEC("cgroup/connect6")
int kpr_connect6(struct bpf_sock_addr *ctx)
{
	return kpr6_fwd(ctx, KPR_STAT_CONNECT_XLATE, KPR_HOOK_CONNECT6);
}

SEC("cgroup/sendmsg6")
int kpr_sendmsg6(struct bpf_sock_addr *ctx)
{
	return kpr6_fwd(ctx, KPR_STAT_SENDMSG_XLATE, KPR_HOOK_SENDMSG6);
}

SEC("cgroup/recvmsg6")
int kpr_recvmsg6(struct bpf_sock_addr *ctx)
{
	kpr6_rev(ctx, KPR_STAT_RECVMSG_XLATE);
	return SYS_PROCEED;
}

SEC("cgroup/getpeername6")
int kpr_getpeername6(struct bpf_sock_addr *ctx)
{
	kpr6_rev(ctx, KPR_STAT_GETPEERNAME_XLATE);
	return SYS_PROCEED;
}
