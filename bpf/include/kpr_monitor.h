/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `kpr monitor`'s events (struct kpr_event, kpr_event.h): kpr_emit is called
 * once at each decision of the socket and tc programs, one line per call
 * site. Off (the switch's deadline 0 or past) it costs one lookup in a
 * one-entry array, which the verifier inlines into a few instructions, and a
 * compare: no helper call. On, a clock read, a ring reservation and the
 * record's stores. A full ring loses the event and counts it
 * (KPR_STAT_MONITOR_LOST); the decision itself never waits or fails.
 * Records are submitted without a wakeup: the reader polls the ring every
 * few milliseconds instead, because a wakeup is an irq_work (a self-IPI)
 * for every record whenever the reader has caught up, which a reader that
 * keeps up always has.
 */
#ifndef __KPR_MONITOR_H
#define __KPR_MONITOR_H

#include "kpr_maps.h"
#include "kpr_addr.h"
#include "kpr_common.h"

static __always_inline bool kpr_hook_is_sock(__u8 hook)
{
	return hook <= KPR_HOOK_SENDMSG6;
}

/*
 * Records one decision while the switch is on. `ctx` is the program's
 * context (the socket path reads its socket and netns cookies); `fe` the
 * frontend key the lookup used (address, port, protocol and the scope
 * found); `svc` its master entry, NULL when none matched; `be` the backend
 * chosen, if any. The tc path names the client (`client`, `client_port`)
 * and the packet's family; the socket path passes NULL, 0, 0 (the family
 * follows from the hook). `hook` is a constant at every call site, so each
 * program keeps only its own branch.
 */
static __always_inline void kpr_emit(void *ctx, __u8 hook, __u8 type, __u8 flags, const struct kpr_svc_key *fe,
				     const struct kpr_svc_val *svc, const struct kpr_backend *be, __u32 backend_id,
				     const __be32 *client, __be16 client_port, __u8 family)
{
	__u32 zero = 0;
	struct kpr_monitor *mon = bpf_map_lookup_elem(&kpr_monitor, &zero);
	struct kpr_event *e;
	__u64 now;

	if (!mon || !mon->until_ns)
		return;
	now = bpf_ktime_get_ns();
	if (now >= mon->until_ns)
		return;
	e = bpf_ringbuf_reserve(&kpr_events, sizeof(*e), 0);
	if (!e) {
		kpr_count(KPR_STAT_MONITOR_LOST);
		return;
	}
	/* Ring memory holds older records: every byte is written, padding included. */
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = now;
	if (kpr_hook_is_sock(hook)) {
		e->cookie = bpf_get_socket_cookie(ctx);
		e->netns_cookie = bpf_get_netns_cookie(ctx);
		e->family = hook == KPR_HOOK_CONNECT4 || hook == KPR_HOOK_SENDMSG4 ? AF_INET : AF_INET6;
	} else {
		kpr_addr_copy(e->client, client);
		e->client_port = client_port;
		e->family = family;
	}
	kpr_addr_copy(e->frontend, fe->addr);
	e->frontend_port = fe->port;
	e->proto = fe->proto;
	e->scope = fe->scope;
	if (svc)
		e->frontend_id = svc->frontend_id;
	if (be) {
		kpr_addr_copy(e->backend, be->addr);
		e->backend_port = be->port;
	}
	e->backend_id = backend_id;
	e->type = type;
	e->hook = hook;
	e->flags = flags;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

#endif /* __KPR_MONITOR_H */
