/*
 * echo-server: the benchmark's 1-byte TCP echo server, run in a pod namespace.
 *
 *   echo-server IP PORT
 *
 * Accepts one connection at a time: receive 1 byte, send it back, close (the
 * server closes first, so the client's ephemeral ports do not pile up in
 * TIME_WAIT). Prints "ready" on stdout once listening. Runs until killed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: echo-server IP PORT\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)atoi(argv[2]));
  if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) return 2;
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(ls, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(ls, 4096) != 0) {
    perror("echo-server");
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  for (;;) {
    int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c;
    if (recv(fd, &c, 1, 0) == 1) send(fd, &c, 1, MSG_NOSIGNAL);
    close(fd);
  }
}
