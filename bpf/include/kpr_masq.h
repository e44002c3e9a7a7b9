/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Masquerade of pod traffic, where kube-proxy masquerades it (rules 35 and
 * 36 of docs/semantics.md), with KPR_CFG_F_MASQ_POD on:
 *  - a pod calling an external address (NodePort on a node address, load-
 *    balancer IP, externalIP) of an externalTrafficPolicy=Cluster Service:
 *    kube-proxy's KUBE-EXT chain marks it for masquerade, so the endpoint
 *    sees a node address;
 *  - a pod that lands on itself through a Service (hairpin): its KUBE-SEP
 *    chain masquerades `-s <endpoint IP>`.
 * The socket hooks cannot change a connection's source, so they leave such
 * a pod connection untranslated: it leaves the pod for the service address
 * and kpr_tc_pod (on the pod's interface, as in service-mesh mode) DNATs it
 * and SNATs it to the node. Every other pod connection keeps the socket path.
 */
#ifndef __KPR_MASQ_H
#define __KPR_MASQ_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>

#include "kpr_types.h"
#include "kpr_addr.h"
#include "kpr_common.h"

#define KPR_SVC_F_EXTERNAL_ADDR (KPR_SVC_F_NODE_PORT | KPR_SVC_F_EXTERNAL_IP | KPR_SVC_F_LOAD_BALANCER)

/* kube-proxy's KUBE-EXT chain of an eTP=Cluster Service masquerades every caller. */
static __always_inline bool kpr_masq_external(const struct kpr_svc_val *svc)
{
	return (svc->flags & KPR_SVC_F_EXTERNAL_ADDR) && !(svc->flags & KPR_SVC_F_LOCAL_ONLY);
}

/*
 * Whether `be` is this node itself: a hostNetwork endpoint on this node, whose
 * address is the node's, the one tc SNATs pod traffic to. kube-proxy DNATs a
 * pod's packet to it and the node delivers it locally, where nothing
 * masquerades it (MASQUERADE is in POSTROUTING): the server sees the pod. A
 * pod flow SNATed to the node's own address and sent to that same address
 * would come in on a pod interface from a local address: IPv4 drops it as a
 * martian, and in IPv6 the server's answer stays in the node and is reset.
 * Unmasqueraded, the server's answers leave the node without passing a kpr
 * program (kpr runs at ingress), so nothing translates them back. So such a
 * backend is reached on the socket path only; tc chooses another.
 */
static __always_inline bool kpr_masq_backend_is_node(const struct kpr_config *cfg, const struct kpr_backend *be)
{
	return cfg && kpr_addr_eq(be->addr, kpr_addr_is_v4(be->addr) ? cfg->snat_v4 : cfg->snat_v6);
}

/*
 * Whether the caller's own network namespace has a socket bound to the
 * backend's port on the wildcard address (a server: 0.0.0.0, or :: which
 * takes IPv4 too): then the caller may be one of the backends and land on
 * itself. Only the port is asked, never which backend was chosen, so the
 * answer does not depend on the choice and the tc path's choice stays
 * uniform. A false "yes" (the caller serves that port but is another
 * backend, or none) only costs the tc path, which decides hairpin from the
 * real source and backend. A server bound to its pod address alone is not
 * seen: its hairpin connections keep the pod address (docs/semantics.md, rule 36).
 */
static __always_inline bool kpr_masq_caller_serves(struct bpf_sock_addr *ctx, const struct kpr_backend *be)
{
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;
	__u32 len;

	if (kpr_addr_is_v4(be->addr)) {
		t.ipv4.dport = be->port;
		len = sizeof(t.ipv4);
	} else {
		t.ipv6.dport = be->port;
		len = sizeof(t.ipv6);
	}
	if (be->proto == IPPROTO_TCP)
		sk = bpf_sk_lookup_tcp(ctx, &t, len, BPF_F_CURRENT_NETNS, 0);
	else
		sk = bpf_sk_lookup_udp(ctx, &t, len, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return false;
	bpf_sk_release(sk);
	return true;
}

/*
 * Socket hooks: true when this pod connection to `svc` must be left to the
 * tc path (`be`, the backend the hook chose, lends its port and family, and
 * is asked one thing: whether it is the node itself, which the socket path
 * connects the pod to straight, as kube-proxy delivers it: unmasqueraded).
 * The choice stays uniform: a connection diverted here is one whose hook
 * chose another backend, and tc then chooses among the others
 * (kpr_lb_select_other). Node processes (the node's netns cookie) are
 * never diverted: their traffic already leaves with a node address, and it
 * would not pass kpr_tc_pod.
 */
static __always_inline bool kpr_masq_sock_divert(struct bpf_sock_addr *ctx, const struct kpr_config *cfg,
						 const struct kpr_svc_val *svc, const struct kpr_backend *be)
{
	if (!cfg || !(cfg->flags & KPR_CFG_F_MASQ_POD) || !cfg->host_netns_cookie)
		return false;
	/*
	 * TCP only. The tc path does not reassemble IP fragments, so a UDP
	 * datagram larger than the path MTU would be lost there, where the socket
	 * path translates it whole: UDP keeps the pod address (rule 35).
	 */
	if (be->proto != IPPROTO_TCP)
		return false;
	if (!kpr_masq_external(svc) && !(svc->flags & KPR_SVC_F_LOCAL_BACKEND))
		return false;
	if (kpr_masq_backend_is_node(cfg, be))
		return false;
	if (bpf_get_netns_cookie(ctx) == cfg->host_netns_cookie)
		return false;
	if (kpr_masq_external(svc))
		return true;
	return kpr_masq_caller_serves(ctx, be);
}

/*
 * tc, a new flow from a pod: SNAT to the node for hairpin (always: a packet
 * from its own address would be dropped as martian) and, with
 * KPR_CFG_F_MASQ_POD, for an external address of an eTP=Cluster Service.
 */
static __always_inline bool kpr_masq_pod_snat(const struct kpr_config *cfg, const struct kpr_svc_val *svc,
					      const __be32 *backend, const __be32 *client)
{
	bool snat = kpr_addr_eq(backend, client) ||
		    (cfg && (cfg->flags & KPR_CFG_F_MASQ_POD) && kpr_masq_external(svc));

	if (snat)
		kpr_count(KPR_STAT_TC_MASQ_SNAT);
	return snat;
}

#endif /* __KPR_MASQ_H */
