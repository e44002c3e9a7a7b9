/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Addresses in the form every kpr map uses (16 bytes, IPv4 stored
 * IPv4-mapped as ::ffff:a.b.c.d, see kpr_types.h) and the named constants the
 * programs share. Needs no map, so any object may include it.
 */
#ifndef __KPR_ADDR_H
#define __KPR_ADDR_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif
#include <stdbool.h>
#include <bpf/bpf_endian.h>

#define NSEC_PER_SEC 1000000000ULL

/* Address families as the kernel numbers them (sockets, bpf_fib_lookup). */
#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* TCP header flag bits, as the tc path records them in kpr_pkt.tcp_flags. */
#define KPR_TCP_FIN 0x01
#define KPR_TCP_SYN 0x02
#define KPR_TCP_RST 0x04

/* Word 2 of an IPv4-mapped address: the 0xffff that follows 80 zero bits. */
#define KPR_V4MAPPED_WORD2 bpf_htonl(0x0000ffff)

/* ::ffff:v4, the form IPv4 has in every map. */
static __always_inline void kpr_addr_from_v4(__be32 *dst, __be32 v4)
{
	dst[0] = 0;
	dst[1] = 0;
	dst[2] = KPR_V4MAPPED_WORD2;
	dst[3] = v4;
}

static __always_inline bool kpr_addr_is_v4(const __be32 *a)
{
	return a[0] == 0 && a[1] == 0 && a[2] == KPR_V4MAPPED_WORD2;
}

static __always_inline bool kpr_addr_is_zero(const __be32 *a)
{
	return !a[0] && !a[1] && !a[2] && !a[3];
}

static __always_inline void kpr_addr_copy(__be32 *dst, const __be32 *src)
{
	dst[0] = src[0];
	dst[1] = src[1];
	dst[2] = src[2];
	dst[3] = src[3];
}

static __always_inline bool kpr_addr_eq(const __be32 *a, const __be32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

#endif /* __KPR_ADDR_H */
