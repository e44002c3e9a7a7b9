/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * How a socket hook refuses a call. kube-proxy refuses a Service with no
 * endpoint with an ICMP port-unreachable (iptables REJECT), which the caller
 * sees as ECONNREFUSED; a cgroup sock_addr program that returns 0 makes the
 * syscall fail with EPERM instead, unless it set another errno with
 * bpf_set_retval (Linux 5.18). Where the kernel has that helper the hook
 * answers ECONNREFUSED, so clients (and the Kubernetes e2e suite, which
 * greps for "REFUSED") see what kube-proxy gives them; on older kernels the
 * caller still fails at once, with EPERM (docs/semantics.md rule 23).
 */
#ifndef __KPR_REFUSE_H
#define __KPR_REFUSE_H

#include <linux/bpf.h>
#include <linux/errno.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* What a cgroup sock_addr program returns to refuse the call. */
#define KPR_SOCK_REFUSE 0

/*
 * Call as `return kpr_sock_refuse();` from a connect/sendmsg hook. The
 * helper's existence is a CO-RE relocation against the running kernel's
 * enum bpf_func_id, resolved to a constant at load, so on a kernel without
 * it the verifier never walks the call (5.10 loads the same object).
 */
static __always_inline int kpr_sock_refuse(void)
{
	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_set_retval))
		bpf_set_retval(-ECONNREFUSED);
	return KPR_SOCK_REFUSE;
}

#endif /* __KPR_REFUSE_H */
