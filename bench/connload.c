/*
 * connload: a sequential TCP connection load generator for kpr's benchmark.
 *
 *   connload IP PORT COUNT TIME_LIMIT_MS [WARMUP]
 *
 * Each iteration: socket, connect, send 1 byte, receive 1 byte, wait for the
 * server's FIN (the server closes first, so TIME_WAIT stays on its side),
 * close. The time of the whole iteration is one sample. Stops after COUNT
 * iterations or TIME_LIMIT_MS, whichever comes first; WARMUP iterations
 * (default 100) run first and are not recorded. Prints one JSON line:
 *   {"count":N,"errors":E,"p50_us":..,"p99_us":..,"mean_us":..,"conns_per_sec":..,"elapsed_ms":..,"first_error":".."}
 * Built by the benchmark with `cc -O2`; not committed as a binary.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* One connection; returns 0 or an errno-like code (negative for protocol errors). */
static int one(const struct sockaddr_in *dst) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct timeval tv = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv); /* bounds connect() too */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int rc = 0;
  char c = 'x';
  if (connect(fd, (const struct sockaddr *)dst, sizeof *dst) != 0) { rc = errno; goto out; }
  if (send(fd, &c, 1, MSG_NOSIGNAL) != 1) { rc = errno ? errno : -1; goto out; }
  ssize_t n = recv(fd, &c, 1, 0);
  if (n != 1) { rc = n < 0 ? errno : -2; goto out; }
  n = recv(fd, &c, 1, 0); /* the server's FIN */
  if (n != 0) rc = n < 0 ? errno : -3;
out:
  close(fd);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: connload IP PORT COUNT TIME_LIMIT_MS [WARMUP]\n");
    return 2;
  }
  struct sockaddr_in dst;
  memset(&dst, 0, sizeof dst);
  dst.sin_family = AF_INET;
  dst.sin_port = htons((uint16_t)atoi(argv[2]));
  if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
    fprintf(stderr, "connload: bad IPv4 address %s\n", argv[1]);
    return 2;
  }
  long count = atol(argv[3]);
  long limit_ms = atol(argv[4]);
  long warmup = argc > 5 ? atol(argv[5]) : 100;
  if (count <= 0 || count > 10000000 || limit_ms <= 0) {
    fprintf(stderr, "connload: COUNT must be 1..10000000 and TIME_LIMIT_MS > 0\n");
    return 2;
  }
  uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)count);
  if (!lat) return 1;
  uint64_t deadline = now_ns() + (uint64_t)limit_ms * 1000000ull;
  long errors = 0;
  int first_error = 0;
  for (long i = 0; i < warmup && now_ns() < deadline; i++) one(&dst);
  uint64_t start = now_ns();
  long done = 0;
  while (done < count) {
    uint64_t t0 = now_ns();
    if (t0 >= deadline) break;
    int rc = one(&dst);
    uint64_t t1 = now_ns();
    if (rc != 0) {
      errors++;
      if (!first_error) first_error = rc;
      if (errors > 1000 && errors > done) break; /* everything fails: stop early */
      continue;
    }
    lat[done++] = t1 - t0;
  }
  uint64_t elapsed = now_ns() - start;
  qsort(lat, (size_t)done, sizeof lat[0], cmp_u64);
  double sum = 0;
  for (long i = 0; i < done; i++) sum += (double)lat[i];
  double p50 = done ? (double)lat[(size_t)((done - 1) * 0.50)] / 1000.0 : 0;
  double p99 = done ? (double)lat[(size_t)((done - 1) * 0.99)] / 1000.0 : 0;
  double mean = done ? sum / done / 1000.0 : 0;
  double cps = elapsed ? (double)done * 1e9 / (double)elapsed : 0;
  char err[64] = "";
  if (first_error > 0) snprintf(err, sizeof err, "%s", strerror(first_error));
  else if (first_error < 0) snprintf(err, sizeof err, "protocol error %d", first_error);
  printf("{\"count\":%ld,\"errors\":%ld,\"p50_us\":%.1f,\"p99_us\":%.1f,\"mean_us\":%.1f,\"conns_per_sec\":%.0f,\"elapsed_ms\":%.1f,\"first_error\":\"%s\"}\n",
         done, errors, p50, p99, mean, cps, (double)elapsed / 1e6, err);
  free(lat);
  return 0;
}
