/**
 * The archives `make image` wrote (build/image/image.json), as a user meets
 * them: skopeo reads each and copies it (checking every blob's digest), its
 * config starts node itself (no shell) with the labels of this build, the
 * layer unpacks into a root filesystem that holds what the agent and the CLI
 * run and nothing of the build (no compiler, npm or tests), every binary is
 * of the archive's architecture, the SBOM inside is the one beside the
 * archive and lists exactly the dpkg database's packages, Node and the npm
 * packages, and the image's own `kpr version` and the agent's start-up
 * checks (`kpr preflight`) run in it: the host's architecture in a chroot
 * (a private mount namespace with /proc, /sys and /dev of the host), the
 * other under qemu-user. Run by `make test-image` (after `make image`).
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoRoot } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';
import { readNodeEnv } from '../../image/inputs.js';
import { debPackage, parseControl } from '../../image/debian.js';

interface ImageSummary {
  image: string;
  revision: string;
  index: string;
  archive: string;
  arches: Record<string, { manifest: string; archive: string; sbom: string }>;
}

const summaryFile = path.join(repoRoot, 'build/image/image.json');
if (!fs.existsSync(summaryFile)) throw new Error(`${summaryFile} is missing: run \`make image\` first (make test-image does)`);
const summary = JSON.parse(fs.readFileSync(summaryFile, 'utf8')) as ImageSummary;
const version = (JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version;
const nodeEnv = readNodeEnv(fs.readFileSync(path.join(repoRoot, 'tools/node.env'), 'utf8'));
const hostArch = execFileSync('dpkg', ['--print-architecture'], { encoding: 'utf8' }).trim();
const ELF_MACHINE: Record<string, number> = { amd64: 62, arm64: 183 };
const QEMU: Record<string, string> = { arm64: 'qemu-aarch64', amd64: 'qemu-x86_64' };
const work = fs.mkdtempSync(path.join(os.tmpdir(), `kpr-image-check-${process.pid}-`));
after(() => fs.rmSync(work, { recursive: true, force: true }));

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: 'utf8', maxBuffer: 256 << 20 });

function elfMachine(file: string): number {
  const head = Buffer.alloc(20);
  const fd = fs.openSync(file, 'r');
  try {
    fs.readSync(fd, head, 0, 20, 0);
  } finally {
    fs.closeSync(fd);
  }
  assert.equal(head.subarray(0, 4).toString('latin1'), '\x7fELF', `${file} is not an ELF file`);
  return head.readUInt16LE(18);
}

/**
 * Runs a command of the image in a chroot of its root filesystem, in a private
 * mount namespace where the host's /proc, /sys and /dev appear. Another
 * architecture's command runs under qemu-user-static, copied into the root
 * (so every path the program opens is the image's own).
 */
function inImage(rootfs: string, arch: string, argv: string[]): { status: number | null; stdout: string; stderr: string } {
  requireRoot();
  let command = argv;
  if (arch !== hostArch) {
    const qemu = `/usr/bin/${QEMU[arch]}-static`;
    if (!fs.existsSync(qemu)) throw new Error(`${qemu} is missing: make test-image installs qemu-user-static`);
    fs.copyFileSync(qemu, path.join(rootfs, 'tmp/qemu-static'));
    fs.chmodSync(path.join(rootfs, 'tmp/qemu-static'), 0o755);
    command = ['/tmp/qemu-static', ...argv];
  }
  const script = 'set -e; for d in proc sys dev; do mount --rbind "/$d" "$0/$d"; mount --make-rslave "$0/$d"; done; exec chroot "$0" "$@"';
  // The image's PATH, and nothing else of this process's environment.
  const env = { PATH: '/opt/kpr/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };
  const r = spawnSync('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script, rootfs, ...command], { encoding: 'utf8', timeout: 300_000, env });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

test('image.json names this build: the version, the commit, both architectures', () => {
  const commit = (JSON.parse(fs.readFileSync(path.join(repoRoot, 'dist/build-info.json'), 'utf8')) as { commit: string }).commit;
  assert.equal(summary.image, `localhost/kpr:${version}`);
  assert.equal(summary.revision, commit);
  assert.deepEqual(Object.keys(summary.arches).sort(), ['amd64', 'arm64']);
});

test('the multi-architecture archive: one index, one manifest per architecture (what skopeo copy --all pushes)', () => {
  const raw = JSON.parse(sh('skopeo', ['inspect', '--raw', `oci-archive:${summary.archive}`])) as {
    mediaType: string;
    manifests: Array<{ digest: string; platform: { architecture: string; os: string } }>;
  };
  assert.equal(raw.mediaType, 'application/vnd.oci.image.index.v1+json');
  assert.deepEqual(
    raw.manifests.map((m) => `${m.platform.os}/${m.platform.architecture}=${m.digest}`).sort(),
    Object.entries(summary.arches)
      .map(([a, s]) => `linux/${a}=${s.manifest}`)
      .sort(),
  );
});

for (const [arch, s] of Object.entries(summary.arches)) {
  describe(`the ${arch} image`, () => {
    const rootfs = path.join(work, arch, 'rootfs');

    test("skopeo copies it (every blob's digest checked) and its config starts node itself, with this build's labels", () => {
      const copyDir = path.join(work, arch, 'dir');
      fs.mkdirSync(path.dirname(copyDir), { recursive: true });
      sh('skopeo', ['copy', '--quiet', `oci-archive:${s.archive}`, `dir:${copyDir}`]);
      const cfg = JSON.parse(sh('skopeo', ['inspect', '--config', `oci-archive:${s.archive}`])) as {
        architecture: string;
        os: string;
        config: { Entrypoint: string[]; Env: string[]; User: string; Labels: Record<string, string> };
      };
      assert.equal(cfg.architecture, arch);
      assert.equal(cfg.os, 'linux');
      assert.equal(cfg.config.Entrypoint[0], '/usr/local/bin/node', 'the entrypoint is node, not a shell');
      assert.equal(cfg.config.Entrypoint.at(-1), '/opt/kpr/dist/kpr-agent.mjs');
      assert.ok(
        cfg.config.Env.some((e) => e.startsWith('PATH=/opt/kpr/bin:')),
        'kpr is on PATH for kubectl exec',
      );
      assert.equal(cfg.config.Labels['org.opencontainers.image.version'], version);
      assert.equal(cfg.config.Labels['org.opencontainers.image.revision'], summary.revision);
      assert.ok(cfg.config.Labels['org.opencontainers.image.source']);
      const manifest = JSON.parse(fs.readFileSync(path.join(copyDir, 'manifest.json'), 'utf8')) as { layers: Array<{ digest: string }> };
      assert.equal(manifest.layers.length, 1);
      fs.mkdirSync(rootfs, { recursive: true });
      sh('tar', [
        '--extract',
        '--gzip',
        '--file',
        path.join(copyDir, manifest.layers[0].digest.replace('sha256:', '')),
        '--directory',
        rootfs,
        '--numeric-owner',
        '--same-permissions',
      ]);
    });

    test('it holds what the agent and the CLI run, for its architecture, and nothing of the build', () => {
      for (const f of [
        'usr/local/bin/node',
        'opt/kpr/dist/kpr-agent.mjs',
        'opt/kpr/dist/kpr.mjs',
        'opt/kpr/dist/build-info.json',
        'opt/kpr/bin/kpr',
        'opt/kpr/bin/kpr-agent',
        'opt/kpr/build/kpr_sock.bpf.o',
        'opt/kpr/build/kpr_tc.bpf.o',
        'opt/kpr/build/kpr_sock_term.bpf.o',
        'opt/kpr/build/libkpr_batch_writer.so',
        'usr/sbin/iptables-nft-restore',
        'usr/sbin/iptables-legacy-restore',
        'usr/sbin/nft',
        'bin/mount',
        'bin/mountpoint',
        'usr/bin/stat',
        'bin/sh',
        'etc/passwd',
      ]) {
        assert.ok(fs.existsSync(path.join(rootfs, f)), `${f} is in the image`);
      }
      const triplet = arch === 'amd64' ? 'linux_x64' : 'linux_arm64';
      assert.deepEqual(fs.readdirSync(path.join(rootfs, 'opt/kpr/node_modules')), ['koffi']);
      assert.deepEqual(fs.readdirSync(path.join(rootfs, 'opt/kpr/node_modules/koffi/build/koffi')), [triplet]);
      for (const f of [
        'usr/local/bin/node',
        'opt/kpr/build/libkpr_batch_writer.so',
        `opt/kpr/node_modules/koffi/build/koffi/${triplet}/koffi.node`,
        'usr/sbin/xtables-nft-multi',
      ]) {
        assert.equal(elfMachine(path.join(rootfs, f)), ELF_MACHINE[arch], `${f} is built for ${arch}`);
      }
      for (const absent of [
        'usr/bin/npm',
        'usr/local/bin/npm',
        'usr/bin/gcc',
        'usr/bin/clang',
        'usr/bin/apt-get',
        'opt/kpr/test',
        'opt/kpr/sandbox',
        'opt/kpr/bench',
        'opt/kpr/agent',
        'var/lib/apt/lists/partial',
      ]) {
        assert.ok(!fs.existsSync(path.join(rootfs, absent)), `${absent} is not in the image`);
      }
      for (const empty of ['usr/share/man', 'usr/share/locale', 'var/cache', 'var/lib/apt'])
        assert.deepEqual(fs.readdirSync(path.join(rootfs, empty)), [], `${empty} is empty`);
      assert.match(fs.readFileSync(path.join(rootfs, 'etc/passwd'), 'utf8'), /^root:[x*]:0:0:/);
      assert.equal(fs.readlinkSync(path.join(rootfs, 'etc/alternatives/iptables')), '/usr/sbin/iptables-nft');
    });

    test('the SBOM inside is the one beside the archive, and lists exactly its Debian packages, Node and the npm packages', () => {
      const inside = fs.readFileSync(path.join(rootfs, 'opt/kpr/sbom.spdx.json'), 'utf8');
      assert.equal(inside, fs.readFileSync(s.sbom, 'utf8'));
      const doc = JSON.parse(inside) as {
        spdxVersion: string;
        packages: Array<{ name: string; versionInfo: string; externalRefs: Array<{ referenceLocator: string }> }>;
      };
      assert.equal(doc.spdxVersion, 'SPDX-2.3');
      const status = fs
        .readFileSync(path.join(rootfs, 'var/lib/dpkg/status'), 'utf8')
        .trim()
        .split('\n\n')
        .map((p) => debPackage(parseControl(p)));
      const debs = doc.packages.filter((p) => p.externalRefs[0].referenceLocator.startsWith('pkg:deb/'));
      assert.deepEqual(debs.map((p) => `${p.name}=${p.versionInfo}`).sort(), status.map((p) => `${p.name}=${p.version}`).sort());
      for (const p of status) {
        assert.equal(p.architecture === 'all' || p.architecture === arch, true, `${p.name} is ${p.architecture}`);
        assert.ok(
          fs.existsSync(path.join(rootfs, 'usr/share/doc', p.name, 'copyright')) || fs.existsSync(path.join(rootfs, 'usr/share/doc', p.source)),
          `${p.name}'s copyright file is kept`,
        );
      }
      for (const pkg of ['libbpf1', 'iptables', 'nftables', 'iproute2', 'libc6'])
        assert.ok(
          debs.some((p) => p.name === pkg),
          `${pkg} is listed`,
        );
      const node = doc.packages.find((p) => p.name === 'node');
      assert.equal(node?.versionInfo, nodeEnv.version);
      const npm = doc.packages.filter((p) => p.externalRefs[0].referenceLocator.startsWith('pkg:npm/') && p.name !== 'node');
      for (const pkg of ['koffi', 'fastify', '@kubernetes/client-node', 'pino', 'prom-client', 'yaml'])
        assert.ok(
          npm.some((p) => p.name === pkg),
          `${pkg} is listed`,
        );
      for (const dev of ['typescript', 'esbuild', '@aws-cdk/lambda-layer-kubectl-v34'])
        assert.ok(!npm.some((p) => p.name === dev), `${dev} (a build tool) is not listed`);
    });

    test(`its own \`kpr version\` runs (${arch === hostArch ? 'chroot' : 'qemu-user'}): the pinned Node, this commit`, () => {
      // qemu-user runs one program: node itself, not the bin/kpr script that starts it.
      const r = inImage(rootfs, arch, arch === hostArch ? ['kpr', 'version'] : ['/usr/local/bin/node', '/opt/kpr/dist/kpr.mjs', 'version']);
      assert.equal(r.status, 0, r.stderr);
      assert.match(r.stdout, new RegExp(`node\\s+v${nodeEnv.version.replace(/\./g, '\\.')}`));
      assert.match(r.stdout, new RegExp(`commit\\s+${summary.revision}`));
      assert.match(r.stdout, /\/opt\/kpr\/build\/kpr_sock\.bpf\.o\s+[0-9a-f]{64}/);
    });

    if (arch === hostArch) {
      test("the agent's start-up checks run in it and pass on this node (kpr preflight, the image's libbpf)", () => {
        const r = inImage(rootfs, arch, ['kpr', 'preflight', '-o', 'json']);
        assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
        const report = JSON.parse(r.stdout) as { ok: boolean; checks: Array<{ name: string; ok: boolean }> };
        const failed = report.checks.filter((c) => !c.ok).map((c) => c.name);
        assert.ok(
          report.checks.some((c) => c.name === 'btf' && c.ok),
          'BTF seen from the image',
        );
        assert.deepEqual(
          failed.filter((n) => ['kernel', 'btf', 'libbpf', 'bpf-objects'].includes(n)),
          [],
        );
      });
    } else {
      test("the image's node loads koffi and the image's libbpf under qemu-user", () => {
        const r = inImage(rootfs, arch, [
          '/usr/local/bin/node',
          '-e',
          "const k=require('/opt/kpr/node_modules/koffi'); const l=k.load('libbpf.so.1'); console.log(typeof l.func('libbpf_major_version', 'uint32', []) === 'function' ? 'libbpf ' + l.func('libbpf_major_version', 'uint32', [])() : 'no')",
        ]);
        assert.equal(r.status, 0, r.stderr);
        assert.match(r.stdout, /^libbpf 1$/m);
      });
    }
  });
}
