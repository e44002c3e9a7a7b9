// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The node's network namespace cookie on kernels without
 * getsockopt(SO_NETNS_COOKIE) (before 5.14). The agent attaches this program
 * to a throwaway child cgroup for a moment and has a short-lived process in
 * that cgroup, inside the node's namespace, create one socket: the program
 * records the cookie bpf_get_netns_cookie() returns for it, which is exactly
 * what kpr_sock_skip compares with. Calling the helper is also what makes a
 * 5.10/5.11 kernel generate the cookie (lazily, net_gen_cookie), so reading
 * net->net_cookie from elsewhere could see 0.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Private to this object (never pinned): slot 0 holds the last cookie seen. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} kpr_netns_seen SEC(".maps");

SEC("cgroup/sock_create")
int kpr_netns_probe(struct bpf_sock *ctx)
{
	__u32 zero = 0;
	__u64 cookie = bpf_get_netns_cookie(ctx);

	bpf_map_update_elem(&kpr_netns_seen, &zero, &cookie, BPF_ANY);
	return 1; /* never refuses the socket */
}
