// SPDX-License-Identifier: Apache-2.0
/*
 * The sandbox's SCTP server and client (Node's net has no SCTP). Built by
 * `make build` into build/kpr-sctp-peer; the tests run it inside a pod's or
 * the node's network namespace and cgroup like client.js and pod-server.js.
 * Plain socket API, no libsctp: socket(..., IPPROTO_SCTP) is all it needs.
 *
 *   kpr-sctp-peer serve PORT NAME
 *       One one-to-many (SOCK_SEQPACKET) socket on [::]:PORT (0.0.0.0 when
 *       the namespace has no IPv6), which serves both one-to-one and
 *       one-to-many clients: the wire protocol is the same. Every message is
 *       answered on its association with "NAME CLIENT_ADDR:CLIENT_PORT", as
 *       agnhost netexec answers "hostname" over SCTP. Prints "listening" on
 *       stdout when ready; runs until killed.
 *
 *   kpr-sctp-peer dial stream|seqpacket IP PORT COUNT [TIMEOUT_MS]
 *       COUNT fresh sockets, one request each: stream connects (the
 *       association is set up by connect(), as the e2e suite's agnhost does)
 *       then sends; seqpacket sends with the address (sendto sets the
 *       association up). Prints one JSON line:
 *       {"ok":N,"failed":N,"answers":{"NAME":N},"errors":{"ECONNREFUSED":N},
 *        "peers":["IP:PORT"],"sources":["IP:PORT"]}
 *       peers: what getpeername (stream) or recvfrom (seqpacket) named;
 *       sources: the client address each server saw.
 *
 *   kpr-sctp-peer inject IP PORT COUNT
 *       COUNT SCTP INIT chunks (valid CRC32c, source ports 40000..) sent to
 *       IP:PORT through a raw IP socket: what an SCTP connect() puts on the
 *       wire, on any kernel, sctp.ko loaded or not (raw sockets need no
 *       protocol module). Like a real SCTP socket's, and unlike a TCP or
 *       UDP one's, the call passes no cgroup sock_addr hook. Prints
 *       {"sent":N,"errors":{"ENETUNREACH":N}} (errors: sends that failed).
 *
 *   kpr-sctp-peer sniff PORT
 *       Prints "INIT SRC_IP:SRC_PORT" for every SCTP INIT to PORT (IPv4 or IPv6) that
 *       reaches this network namespace (a raw socket sees each SCTP packet
 *       the namespace receives). Prints "listening" when ready; runs until
 *       killed.
 *
 * Exit code 0 when the command ran (the JSON says what happened), 2 on bad
 * usage, 3 when this kernel has no SCTP (socket() fails with
 * EPROTONOSUPPORT/ESOCKTNOSUPPORT): the message says so.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_KEYS 64

struct tally {
	char key[MAX_KEYS][96];
	int count[MAX_KEYS];
	int n;
};

static void tally_add(struct tally *t, const char *key)
{
	for (int i = 0; i < t->n; i++) {
		if (strcmp(t->key[i], key) == 0) {
			t->count[i]++;
			return;
		}
	}
	if (t->n == MAX_KEYS)
		return;
	snprintf(t->key[t->n], sizeof(t->key[0]), "%s", key);
	t->count[t->n++] = 1;
}

static void print_tally(const char *name, const struct tally *t, int as_list)
{
	printf("\"%s\":%c", name, as_list ? '[' : '{');
	for (int i = 0; i < t->n; i++) {
		if (as_list)
			printf("%s\"%s\"", i ? "," : "", t->key[i]);
		else
			printf("%s\"%s\":%d", i ? "," : "", t->key[i], t->count[i]);
	}
	printf("%c", as_list ? ']' : '}');
}

/* "IP:PORT" ("[IP]:PORT" for IPv6; an IPv4-mapped IPv6 address as plain IPv4). */
static void addr_str(const struct sockaddr_storage *ss, char *out, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)ss;

		inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
		snprintf(out, len, "%s:%u", ip, ntohs(s->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)ss;

		if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) {
			inet_ntop(AF_INET, &s->sin6_addr.s6_addr[12], ip, sizeof(ip));
			snprintf(out, len, "%s:%u", ip, ntohs(s->sin6_port));
		} else {
			inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
			snprintf(out, len, "[%s]:%u", ip, ntohs(s->sin6_port));
		}
	} else {
		snprintf(out, len, "family-%d", ss->ss_family);
	}
}

static int sctp_socket(int family, int type)
{
	int fd = socket(family, type, IPPROTO_SCTP);

	if (fd < 0 && (errno == EPROTONOSUPPORT || errno == ESOCKTNOSUPPORT)) {
		fprintf(stderr, "kpr-sctp-peer: this kernel has no SCTP (socket(IPPROTO_SCTP): %s); "
				"load it with `modprobe sctp` (CONFIG_IP_SCTP)\n", strerror(errno));
		exit(3);
	}
	return fd;
}

static int serve(int port, const char *name)
{
	struct sockaddr_storage ss = {};
	socklen_t sslen;
	int off = 0;
	int fd = sctp_socket(AF_INET6, SOCK_SEQPACKET);

	if (fd >= 0) {
		struct sockaddr_in6 *s6 = (void *)&ss;

		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		sslen = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (void *)&ss;

		fd = sctp_socket(AF_INET, SOCK_SEQPACKET);
		if (fd < 0) {
			perror("kpr-sctp-peer: socket");
			return 1;
		}
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		sslen = sizeof(*s4);
	}
	if (bind(fd, (struct sockaddr *)&ss, sslen) || listen(fd, 128)) {
		perror("kpr-sctp-peer: bind/listen");
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	for (;;) {
		struct sockaddr_storage from = {};
		socklen_t fromlen = sizeof(from);
		char buf[256], reply[256], peer[128];
		ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fromlen);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("kpr-sctp-peer: recvfrom");
			return 1;
		}
		if (n == 0)
			continue; /* a notification or an empty message: nothing to answer */
		addr_str(&from, peer, sizeof(peer));
		snprintf(reply, sizeof(reply), "%s %s", name, peer);
		if (sendto(fd, reply, strlen(reply), 0, (struct sockaddr *)&from, fromlen) < 0)
			perror("kpr-sctp-peer: sendto");
	}
}

static int parse_target(const char *ip, int port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *s4 = (void *)ss;
	struct sockaddr_in6 *s6 = (void *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		*len = sizeof(*s4);
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		*len = sizeof(*s6);
		return 0;
	}
	return -1;
}

static const char *errno_name(int e)
{
	switch (e) {
	case ECONNREFUSED: return "ECONNREFUSED";
	case EPERM: return "EPERM";
	case ETIMEDOUT: return "ETIMEDOUT";
	case EAGAIN: return "EAGAIN"; /* SO_RCVTIMEO/SO_SNDTIMEO passed */
	case EINPROGRESS: return "EINPROGRESS";
	case ENETUNREACH: return "ENETUNREACH";
	case EHOSTUNREACH: return "EHOSTUNREACH";
	case ECONNRESET: return "ECONNRESET";
	case EPIPE: return "EPIPE";
	case ENOTCONN: return "ENOTCONN";
	case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
	default: return "EOTHER";
	}
}

static int dial(const char *mode, const char *ip, int port, int count, int timeout_ms)
{
	struct tally answers = {}, errors = {}, peers = {}, sources = {};
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
	struct sockaddr_storage target;
	socklen_t tlen;
	int stream = strcmp(mode, "stream") == 0;
	int ok = 0, failed = 0;

	if (!stream && strcmp(mode, "seqpacket") != 0) {
		fprintf(stderr, "kpr-sctp-peer: mode is stream or seqpacket, not %s\n", mode);
		return 2;
	}
	if (parse_target(ip, port, &target, &tlen)) {
		fprintf(stderr, "kpr-sctp-peer: not an IP address: %s\n", ip);
		return 2;
	}
	for (int i = 0; i < count; i++) {
		struct sockaddr_storage peer = {}, from = {};
		socklen_t plen = sizeof(peer), flen = sizeof(from);
		char buf[256], str[128];
		const char *req = "hostname";
		ssize_t n;
		int fd = sctp_socket(target.ss_family, stream ? SOCK_STREAM : SOCK_SEQPACKET);

		if (fd < 0) {
			perror("kpr-sctp-peer: socket");
			return 1;
		}
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (stream) {
			if (connect(fd, (struct sockaddr *)&target, tlen) ||
			    getpeername(fd, (struct sockaddr *)&peer, &plen) ||
			    send(fd, req, strlen(req), 0) < 0)
				goto fail;
			n = recv(fd, buf, sizeof(buf) - 1, 0);
		} else {
			if (sendto(fd, req, strlen(req), 0, (struct sockaddr *)&target, tlen) < 0)
				goto fail;
			n = recvfrom(fd, buf, sizeof(buf) - 1, 0, (struct sockaddr *)&from, &flen);
			peer = from;
		}
		if (n <= 0) {
			if (n == 0)
				errno = ECONNRESET;
			goto fail;
		}
		buf[n] = 0;
		{
			char *space = strchr(buf, ' ');

			if (space) {
				*space = 0;
				tally_add(&sources, space + 1);
			}
		}
		tally_add(&answers, buf);
		addr_str(&peer, str, sizeof(str));
		tally_add(&peers, str);
		ok++;
		close(fd);
		continue;
fail:
		tally_add(&errors, errno_name(errno));
		failed++;
		close(fd);
	}
	printf("{\"ok\":%d,\"failed\":%d,", ok, failed);
	print_tally("answers", &answers, 0);
	printf(",");
	print_tally("errors", &errors, 0);
	printf(",");
	print_tally("peers", &peers, 1);
	printf(",");
	print_tally("sources", &sources, 1);
	printf("}\n");
	return 0;
}

static unsigned int crc32c_table[256];

static unsigned int crc32c(const unsigned char *p, size_t n)
{
	unsigned int c = 0xffffffff;

	if (!crc32c_table[1]) {
		for (unsigned int i = 0; i < 256; i++) {
			unsigned int v = i;

			for (int k = 0; k < 8; k++)
				v = v & 1 ? (v >> 1) ^ 0x82f63b78 : v >> 1;
			crc32c_table[i] = v;
		}
	}
	while (n--)
		c = crc32c_table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffff;
}

static int inject(const char *ip, int port, int count)
{
	struct sockaddr_storage target;
	struct tally errors = {};
	socklen_t tlen;
	int fd, sent = 0;

	if (parse_target(ip, 0, &target, &tlen)) {
		fprintf(stderr, "kpr-sctp-peer: not an IP address: %s\n", ip);
		return 2;
	}
	fd = socket(target.ss_family, SOCK_RAW, IPPROTO_SCTP);
	if (fd < 0) {
		perror("kpr-sctp-peer: raw socket");
		return 1;
	}
	for (int i = 0; i < count; i++) {
		/* Common header (12 bytes) and an INIT chunk (20 bytes), RFC 9260 3.1 and 3.3.2. */
		unsigned char pkt[32] = {};
		unsigned short sport = htons(40000 + i), dport = htons(port);
		unsigned int v, crc;

		memcpy(pkt, &sport, 2);
		memcpy(pkt + 2, &dport, 2);
		pkt[12] = 1; /* INIT */
		pkt[15] = 20; /* chunk length */
		v = htonl(0x6b707200 + i); /* initiate tag */
		memcpy(pkt + 16, &v, 4);
		v = htonl(65536); /* a_rwnd */
		memcpy(pkt + 20, &v, 4);
		pkt[25] = 10; /* outbound streams */
		pkt[27] = 10; /* inbound streams */
		v = htonl(1); /* initial TSN */
		memcpy(pkt + 28, &v, 4);
		crc = crc32c(pkt, sizeof(pkt));
		/* The CRC goes on the wire least significant byte first, as Linux's sctp_compute_cksum stores it. */
		pkt[8] = crc & 0xff;
		pkt[9] = (crc >> 8) & 0xff;
		pkt[10] = (crc >> 16) & 0xff;
		pkt[11] = crc >> 24;
		if (sendto(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&target, tlen) == sizeof(pkt))
			sent++;
		else
			tally_add(&errors, errno_name(errno));
	}
	close(fd);
	printf("{\"sent\":%d,", sent);
	print_tally("errors", &errors, 0);
	printf("}\n");
	return 0;
}

/* One received SCTP packet (`l4`: its SCTP header): "INIT SRC:PORT" when it is an INIT to `port`. */
static void sniff_report(const unsigned char *l4, size_t len, int port, const char *ip)
{
	if (len < 13 || l4[12] != 1)
		return; /* not an INIT */
	if (((l4[2] << 8) | l4[3]) != port)
		return;
	printf("INIT %s:%u\n", ip, (l4[0] << 8) | l4[1]);
	fflush(stdout);
}

static int sniff(int port)
{
	int fd4 = socket(AF_INET, SOCK_RAW, IPPROTO_SCTP);
	int fd6 = socket(AF_INET6, SOCK_RAW, IPPROTO_SCTP); /* -1 when the namespace has no IPv6: IPv4 only */

	if (fd4 < 0) {
		perror("kpr-sctp-peer: raw socket");
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	for (;;) {
		struct pollfd pfd[2] = { { .fd = fd4, .events = POLLIN }, { .fd = fd6, .events = POLLIN } };
		unsigned char buf[2048];
		char ip[INET6_ADDRSTRLEN];
		ssize_t n;

		if (poll(pfd, fd6 >= 0 ? 2 : 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			perror("kpr-sctp-peer: poll");
			return 1;
		}
		if (pfd[0].revents & POLLIN) {
			struct sockaddr_in from = {};
			socklen_t flen = sizeof(from);
			size_t ihl;

			n = recvfrom(fd4, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
			if (n < 0 && errno != EINTR) {
				perror("kpr-sctp-peer: recvfrom");
				return 1;
			}
			/* An IPv4 raw socket receives the IP header too. */
			ihl = n > 0 ? (size_t)(buf[0] & 0xf) * 4 : 0;
			if (n > 0 && (size_t)n > ihl) {
				inet_ntop(AF_INET, &from.sin_addr, ip, sizeof(ip));
				sniff_report(buf + ihl, (size_t)n - ihl, port, ip);
			}
		}
		if (fd6 >= 0 && (pfd[1].revents & POLLIN)) {
			struct sockaddr_in6 from = {};
			socklen_t flen = sizeof(from);

			/* An IPv6 raw socket receives from the SCTP header on. */
			n = recvfrom(fd6, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
			if (n < 0 && errno != EINTR) {
				perror("kpr-sctp-peer: recvfrom");
				return 1;
			}
			if (n > 0) {
				inet_ntop(AF_INET6, &from.sin6_addr, ip, sizeof(ip));
				sniff_report(buf, (size_t)n, port, ip);
			}
		}
	}
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "inject") == 0)
		return inject(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc == 3 && strcmp(argv[1], "sniff") == 0)
		return sniff(atoi(argv[2]));
	if (argc == 4 && strcmp(argv[1], "serve") == 0)
		return serve(atoi(argv[2]), argv[3]);
	if ((argc == 6 || argc == 7) && strcmp(argv[1], "dial") == 0)
		return dial(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), argc == 7 ? atoi(argv[6]) : 3000);
	fprintf(stderr, "usage: kpr-sctp-peer serve PORT NAME | dial stream|seqpacket IP PORT COUNT [TIMEOUT_MS] | inject IP PORT COUNT | sniff PORT\n");
	return 2;
}
