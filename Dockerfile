# kpr image: the agent (bin/kpr-agent) and the CLI (bin/kpr).
#
# The build stage runs exactly what CI runs: `make build` (Debian packages,
# npm ci, the BPF objects, the TypeScript). Building the BPF objects reads the
# kernel's BTF (/sys/kernel/btf/vmlinux → build/vmlinux.h), which a BuildKit
# build sees from the build host; the objects are CO-RE and load on any kernel
# with BTF.
#
# Base: Node 22 LTS on Debian bookworm (libbpf1 1.1), pinned by digest, the
# tag beside it for humans (the digest is the multi-arch index of
# node:22.23.3-bookworm-slim as of 2026-10-09; bump both together:
# `docker buildx imagetools inspect node:22.23.3-bookworm-slim`).
FROM node:22.23.3-bookworm-slim@sha256:c3de60bf2f9dd0ac6370e6117950ff62d6e339527e7472301c9c78a017978392 AS build
WORKDIR /src
COPY package.json package-lock.json Makefile tsconfig.json ./
COPY agent ./agent
COPY native ./native
COPY sandbox ./sandbox
COPY bench ./bench
COPY test ./test
COPY bpf ./bpf
COPY bin ./bin
# The commit `kpr version` names (.git is not in the build context):
# docker build --build-arg GIT_COMMIT=$(git rev-parse HEAD) .; without it, "unknown".
ARG GIT_COMMIT
RUN make build
# Production dependencies only, for the runtime stage.
RUN make deps-node-prod

FROM node:22.23.3-bookworm-slim@sha256:c3de60bf2f9dd0ac6370e6117950ff62d6e339527e7472301c9c78a017978392 AS runtime
# libbpf1: the agent loads libbpf.so.1 through koffi. iproute2, iptables,
# nftables: `kpr cleanup-kube-proxy` (the agent itself never calls them).
# The image holds only what the agent and the CLI run: no npm, npx, corepack
# or yarn (nothing installs packages at run time), no tests, sandbox or bench.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libbpf1 iproute2 iptables nftables \
 && rm -rf /var/lib/apt/lists/* \
 && rm -rf /usr/local/lib/node_modules /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack /usr/local/bin/yarn /usr/local/bin/yarnpkg /opt/yarn-*
WORKDIR /opt/kpr
COPY --from=build /src/package.json ./package.json
COPY --from=build /src/node_modules ./node_modules
# The agent (bin/kpr-agent) and the CLI (bin/kpr) run from their bundles; node_modules
# is there for koffi (a native addon, outside the bundles). build-info.json: the commit.
COPY --from=build /src/dist/kpr-agent.mjs /src/dist/kpr.mjs /src/dist/build-info.json ./dist/
COPY --from=build /src/build/*.bpf.o /src/build/libkpr_batch_writer.so ./build/
COPY --from=build /src/bin ./bin
ENV PATH=/opt/kpr/bin:$PATH
ENTRYPOINT ["/opt/kpr/bin/kpr-agent"]
