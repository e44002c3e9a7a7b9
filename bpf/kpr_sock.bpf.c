// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Socket-level load balancing: a service address is translated once, when the
 * socket connects (TCP, connected UDP) or per datagram (unconnected UDP), so
 * established traffic pays nothing per packet and never needs conntrack.
 * IPv4 and IPv6 hooks share one pipeline over 16-byte addresses:
 * kpr_lookup_service -> kpr_select_backend -> kpr_xlate_fwd.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/errno.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "kpr_types.h"
#include "kpr_maps.h"
#include "kpr_common.h"

#define SYS_REJECT 0
#define SYS_PROCEED 1
#define NSEC_PER_SEC 1000000000ULL

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* A destination in the form every map uses. */
struct kpr_dst {
	__be32 addr[4];
	__be16 port;
	__u8 proto;
};

static __always_inline bool kpr_proto_supported(__u32 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP;
}

static __always_inline void kpr_addr_from_v4(__be32 *dst, __be32 v4)
{
	dst[0] = 0;
	dst[1] = 0;
	dst[2] = bpf_htonl(0x0000ffff);
	dst[3] = v4;
}

static __always_inline bool kpr_addr_is_v4(const __be32 *a)
{
	return a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0x0000ffff);
}

static __always_inline bool kpr_svc_is_affinity(const struct kpr_svc_val *svc)
{
	return svc->flags & KPR_SVC_F_AFFINITY;
}

/* In-node callers prefer the INTERNAL entry set when the frontend has one. */
static __always_inline struct kpr_svc_val *
kpr_lookup_service(const struct kpr_dst *dst, struct kpr_svc_key *key)
{
	struct kpr_svc_val *svc;

	__builtin_memset(key, 0, sizeof(*key));
	kpr_addr_copy(key->addr, dst->addr);
	key->port = dst->port;
	key->proto = dst->proto;
	key->scope = KPR_SCOPE_INTERNAL;
	svc = bpf_map_lookup_elem(&kpr_svc, key);
	if (svc)
		return svc;
	key->scope = KPR_SCOPE_EXTERNAL;
	return bpf_map_lookup_elem(&kpr_svc, key);
}

static __always_inline struct kpr_backend *
kpr_backend_by_slot(struct kpr_svc_key *key, __u16 slot, __u32 *backend_id)
{
	struct kpr_svc_val *val;

	key->slot = slot;
	val = bpf_map_lookup_elem(&kpr_svc, key);
	if (!val)
		return NULL;
	*backend_id = val->backend_id;
	return bpf_map_lookup_elem(&kpr_backend, backend_id);
}

/*
 * The affinity entry's backend, if the client has one that is fresh and
 * still serves this frontend.
 */
static __always_inline struct kpr_backend *
kpr_affinity_backend(struct bpf_sock_addr *ctx, const struct kpr_svc_val *svc,
		     struct kpr_affinity_key *akey, __u64 now, __u32 *backend_id)
{
	struct kpr_affinity_match_key mkey = {};
	struct kpr_affinity_val *aval;
	__u64 timeout_ns = (__u64)svc->backend_id * NSEC_PER_SEC;

	__builtin_memset(akey, 0, sizeof(*akey));
	akey->netns_cookie = bpf_get_netns_cookie(ctx);
	akey->rev_nat_id = svc->rev_nat_id;
	aval = bpf_map_lookup_elem(&kpr_affinity, akey);
	if (!aval || now - aval->last_used_ns > timeout_ns)
		return NULL;
	mkey.backend_id = aval->backend_id;
	mkey.rev_nat_id = svc->rev_nat_id;
	if (!bpf_map_lookup_elem(&kpr_aff_match, &mkey))
		return NULL;
	*backend_id = aval->backend_id;
	return bpf_map_lookup_elem(&kpr_backend, backend_id);
}

static __always_inline struct kpr_backend *
kpr_select_backend(struct bpf_sock_addr *ctx, struct kpr_svc_key *key, const struct kpr_svc_val *svc)
{
	struct kpr_affinity_key akey;
	struct kpr_affinity_val aval = {};
	struct kpr_backend *be;
	__u32 backend_id = 0;
	__u64 now = 0;

	if (kpr_svc_is_affinity(svc)) {
		now = bpf_ktime_get_ns();
		be = kpr_affinity_backend(ctx, svc, &akey, now, &backend_id);
		if (be) {
			kpr_count(KPR_STAT_AFFINITY_HIT);
			goto remember;
		}
	}
	/* Uniform random choice, as kube-proxy's statistic-mode rules. */
	be = kpr_backend_by_slot(key, (bpf_get_prandom_u32() % svc->count) + 1, &backend_id);
	if (!be || !kpr_svc_is_affinity(svc))
		return be;
remember:
	aval.last_used_ns = now;
	aval.backend_id = backend_id;
	bpf_map_update_elem(&kpr_affinity, &akey, &aval, BPF_ANY);
	return be;
}

/*
 * In service-mesh mode the hooks serve only the node's own processes; pod
 * traffic is left to the tc path so a sidecar sees the ClusterIP it expects.
 */
static __always_inline bool kpr_sock_skip(struct bpf_sock_addr *ctx)
{
	__u32 zero = 0;
	struct kpr_config *cfg = bpf_map_lookup_elem(&kpr_config, &zero);

	return cfg && (cfg->flags & KPR_CFG_F_SOCK_HOST_ONLY) &&
	       bpf_get_netns_cookie(ctx) != cfg->host_netns_cookie;
}

/*
 * Translates *dst if it is a service frontend. Returns 0 when translated or
 * not a service, -EHOSTUNREACH when the caller must be refused at once (no
 * backend, or a service address on a port no Service defines), -ENOENT when
 * a slot or backend vanished underneath us.
 */
static __always_inline int kpr_xlate_fwd(struct bpf_sock_addr *ctx, struct kpr_dst *dst, __u32 stat)
{
	struct kpr_revnat_key rkey = {};
	struct kpr_revnat_val rval = {};
	struct kpr_svc_key key;
	struct kpr_svc_val *svc;
	struct kpr_backend *be;

	if (kpr_sock_skip(ctx))
		return 0;
	svc = kpr_lookup_service(dst, &key);
	if (!svc) {
		struct kpr_vip_key vkey = {};
		struct kpr_vip_val *vip;

		kpr_addr_copy(vkey.addr, dst->addr);
		vip = bpf_map_lookup_elem(&kpr_vip, &vkey);
		if (vip && (vip->flags & KPR_VIP_F_REFUSE_UNKNOWN_PORT)) {
			kpr_count(KPR_STAT_UNKNOWN_PORT);
			return -EHOSTUNREACH;
		}
		return 0;
	}
	if (svc->count == 0) {
		kpr_count(KPR_STAT_NO_BACKEND);
		return -EHOSTUNREACH;
	}
	be = kpr_select_backend(ctx, &key, svc);
	if (!be) {
		kpr_count(KPR_STAT_BACKEND_MISSING);
		return -ENOENT;
	}

	rkey.cookie = bpf_get_socket_cookie(ctx);
	kpr_addr_copy(rkey.addr, be->addr);
	rkey.port = be->port;
	kpr_addr_copy(rval.addr, dst->addr);
	rval.port = dst->port;
	rval.rev_nat_id = svc->rev_nat_id;
	/* Best effort: a full LRU evicts an old socket's entry, never fails us. */
	bpf_map_update_elem(&kpr_revnat, &rkey, &rval, BPF_ANY);

	kpr_addr_copy(dst->addr, be->addr);
	dst->port = be->port;
	kpr_count(stat);
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
	rval = bpf_map_lookup_elem(&kpr_revnat, &rkey);
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
	return err == -EHOSTUNREACH ? SYS_REJECT : SYS_PROCEED;
}

/* ---------------------------------------------------------------- IPv4 */

static __always_inline int kpr4_fwd(struct bpf_sock_addr *ctx, __u32 stat)
{
	struct kpr_dst dst = {};
	int err;

	if (!kpr_proto_supported(ctx->protocol))
		return SYS_PROCEED;
	kpr_addr_from_v4(dst.addr, ctx->user_ip4);
	dst.port = (__be16)ctx->user_port;
	dst.proto = (__u8)ctx->protocol;
	err = kpr_xlate_fwd(ctx, &dst, stat);
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
	return kpr4_fwd(ctx, KPR_STAT_CONNECT_XLATE);
}

SEC("cgroup/sendmsg4")
int kpr_sendmsg4(struct bpf_sock_addr *ctx)
{
	return kpr4_fwd(ctx, KPR_STAT_SENDMSG_XLATE);
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
static __always_inline int kpr6_fwd(struct bpf_sock_addr *ctx, __u32 stat)
{
	struct kpr_dst dst = {};
	int err;

	if (!kpr_proto_supported(ctx->protocol))
		return SYS_PROCEED;
	kpr6_load(ctx, &dst);
	dst.proto = (__u8)ctx->protocol;
	err = kpr_xlate_fwd(ctx, &dst, stat);
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
	return kpr6_fwd(ctx, KPR_STAT_CONNECT_XLATE);
}

SEC("cgroup/sendmsg6")
int kpr_sendmsg6(struct bpf_sock_addr *ctx)
{
	return kpr6_fwd(ctx, KPR_STAT_SENDMSG_XLATE);
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
