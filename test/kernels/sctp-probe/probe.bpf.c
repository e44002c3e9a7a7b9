// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Probe for rule 39 of docs/semantics.md: which cgroup sock_addr hooks run
 * for SCTP sockets (ctx->protocol == IPPROTO_SCTP), and can connect4 and
 * sendmsg4 rewrite their address as kpr's hooks do for TCP and UDP?
 * hits[i] counts SCTP calls per hook; connect4/sendmsg4 rewrite 198.18.0.1
 * to 127.0.0.1, getpeername4 127.0.0.1 back to 198.18.0.1. Run by probe.sh.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

#define VIP bpf_htonl(0xc6120001) /* 198.18.0.1 */
#define LO bpf_htonl(0x7f000001)

static __always_inline void hit(__u32 i, struct bpf_sock_addr *ctx)
{
	__u64 *v;

	if (ctx->protocol != IPPROTO_SCTP)
		return;
	v = bpf_map_lookup_elem(&hits, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("cgroup/connect4") int c4(struct bpf_sock_addr *ctx) { hit(0, ctx); if (ctx->user_ip4 == VIP) ctx->user_ip4 = LO; return 1; }
SEC("cgroup/sendmsg4") int s4(struct bpf_sock_addr *ctx) { hit(1, ctx); if (ctx->user_ip4 == VIP) ctx->user_ip4 = LO; return 1; }
SEC("cgroup/recvmsg4") int r4(struct bpf_sock_addr *ctx) { hit(2, ctx); return 1; }
SEC("cgroup/getpeername4") int g4(struct bpf_sock_addr *ctx) { hit(3, ctx); if (ctx->protocol == IPPROTO_SCTP && ctx->user_ip4 == LO) ctx->user_ip4 = VIP; return 1; }
SEC("cgroup/connect6") int c6(struct bpf_sock_addr *ctx) { hit(4, ctx); return 1; }
SEC("cgroup/sendmsg6") int s6(struct bpf_sock_addr *ctx) { hit(5, ctx); return 1; }
SEC("cgroup/recvmsg6") int r6(struct bpf_sock_addr *ctx) { hit(6, ctx); return 1; }
SEC("cgroup/getpeername6") int g6(struct bpf_sock_addr *ctx) { hit(7, ctx); return 1; }
