/**
 * `make image`: the kpr image for each architecture, built with no registry
 * and no container engine (docs/install.md, *The image*).
 *
 *   node dist/image/build.js [--arches amd64,arm64] [--out build/image]
 *
 * Per architecture: Debian bookworm's packages unpacked by mmdebstrap (the
 * extract variant: no maintainer script runs, so a foreign architecture
 * needs no emulation, and the few things those scripts would do are done
 * here, the same for every architecture); the Node LTS of tools/node.env from
 * the npm registry; the build outputs (the two bundles, the BPF objects, the
 * batch writer, koffi's native part for that architecture); an SPDX SBOM.
 * Every timestamp is SOURCE_DATE_EPOCH (the commit's time), the layer is a
 * sorted tar with numeric owners, so the same commit and the same Debian
 * package versions give the same digests. Written as OCI archives (one per
 * architecture, and one multi-architecture index) and an OCI layout.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { findRepoRoot } from '../agent/runtime/paths.js';
import { debPackage, dpkgStatus, parseControl, type DebPackage } from './debian.js';
import {
  IMAGE_ARCHES,
  MEDIA_TYPE,
  OCI_LAYOUT,
  canonicalJson,
  describeBlob,
  imageConfig,
  imageIndex,
  imageManifest,
  refAnnotations,
  type Descriptor,
  type ImageArch,
  type ImageMeta,
} from './oci.js';
import { spdxDocument, type NpmPackage } from './sbom.js';
import { agentNodeFlagsOf, bundledNpmPackages, readNodeEnv, type NodeEnv } from './inputs.js';

const root = findRepoRoot();
const IMAGE_NAME = 'localhost/kpr';
const SUITE = 'bookworm';
const DISTRO = 'debian-12';
const MIRRORS = [
  `deb http://deb.debian.org/debian ${SUITE} main`,
  `deb http://deb.debian.org/debian ${SUITE}-updates main`,
  `deb http://deb.debian.org/debian-security ${SUITE}-security main`,
];
/**
 * What the root filesystem holds besides what these depend on: libbpf for the
 * agent; libstdc++ for Node; iproute2, iptables, nftables, ipset and ipvsadm for `kpr cleanup-kube-proxy` (and an
 * operator's `kubectl exec`); dash, coreutils and util-linux for the chart's
 * init container (sh, stat, mount); base-passwd for /etc/passwd.
 */
const DEBIAN_PACKAGES = [
  'base-files',
  'base-passwd',
  'dash',
  'coreutils',
  'util-linux',
  'mount',
  'libbpf1',
  'libstdc++6',
  'iproute2',
  'iptables',
  'nftables',
  'ipset',
  'ipvsadm',
  'netbase',
];
/** The alternatives iptables' maintainer script would set up: the nft back end, Debian's default. */
const IPTABLES_ALTERNATIVES = ['iptables', 'iptables-save', 'iptables-restore', 'ip6tables', 'ip6tables-save', 'ip6tables-restore'];
const NODE_ARCH: Record<ImageArch, string> = { amd64: 'x64', arm64: 'arm64' };
const KOFFI_TRIPLET: Record<ImageArch, string> = { amd64: 'linux_x64', arm64: 'linux_arm64' };
const ENV_PATH = 'PATH=/opt/kpr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

function run(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): void {
  const r = spawnSync(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'], env: opts.env ?? process.env, cwd: opts.cwd });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.error?.message ?? `exit ${r.status ?? r.signal}`}`);
}

const out = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20 });

function hostDebArch(): string {
  return out('dpkg', ['--print-architecture']).trim();
}

/** The build outputs of one architecture: the host's in build/, another's in build/arch/ARCH (Makefile). */
function archOutputs(arch: ImageArch): string {
  const dir = arch === hostDebArch() ? path.join(root, 'build') : path.join(root, 'build', 'arch', arch);
  for (const f of ['kpr_sock.bpf.o', 'kpr_tc.bpf.o', 'kpr_sock_term.bpf.o', 'kpr_netns_probe.bpf.o', 'libkpr_batch_writer.so']) {
    if (!fs.existsSync(path.join(dir, f))) throw new Error(`${path.join(dir, f)} is missing: run \`make image\` (it builds every architecture's outputs)`);
  }
  return dir;
}

function copy(src: string, dst: string, mode?: number): void {
  fs.mkdirSync(path.dirname(dst), { recursive: true });
  fs.copyFileSync(src, dst);
  if (mode !== undefined) fs.chmodSync(dst, mode);
}

/** Debian's packages for one architecture, unpacked; returns what was unpacked. */
function debianRoot(arch: ImageArch, rootfs: string, epoch: number): DebPackage[] {
  fs.rmSync(rootfs, { recursive: true, force: true });
  run(
    'mmdebstrap',
    [
      '--quiet',
      '--variant=extract',
      `--arch=${arch}`,
      `--include=${DEBIAN_PACKAGES.join(',')}`,
      // The downloaded .deb files stay for their control data (read below, then removed).
      '--skip=cleanup/apt/cache',
      SUITE,
      rootfs,
      ...MIRRORS,
    ],
    { env: { ...process.env, SOURCE_DATE_EPOCH: String(epoch) } },
  );
  const archives = path.join(rootfs, 'var/cache/apt/archives');
  const debs = fs
    .readdirSync(archives)
    .filter((f) => f.endsWith('.deb'))
    .sort();
  if (debs.length === 0) throw new Error(`mmdebstrap left no .deb files in ${archives}`);
  return debs.map((f) => debPackage(parseControl(out('dpkg-deb', ['-f', path.join(archives, f)]))));
}

/** What dpkg and the maintainer scripts would have left, and nothing an image does not need. */
function configureRoot(rootfs: string, debs: DebPackage[]): void {
  const p = (...s: string[]) => path.join(rootfs, ...s);
  fs.mkdirSync(p('var/lib/dpkg'), { recursive: true });
  fs.writeFileSync(p('var/lib/dpkg/status'), dpkgStatus(debs));
  // base-passwd's preinst copies its masters into place.
  copy(p('usr/share/base-passwd/passwd.master'), p('etc/passwd'), 0o644);
  copy(p('usr/share/base-passwd/group.master'), p('etc/group'), 0o644);
  for (const name of IPTABLES_ALTERNATIVES) {
    const alt = p('etc/alternatives', name);
    fs.mkdirSync(path.dirname(alt), { recursive: true });
    fs.rmSync(alt, { force: true });
    fs.symlinkSync(`/usr/sbin/${name.replace(/^(ip6?tables)/, '$1-nft')}`, alt);
    fs.rmSync(p('usr/sbin', name), { force: true });
    fs.symlinkSync(`/etc/alternatives/${name}`, p('usr/sbin', name));
  }
  // Docs but the copyright files (the licences travel with the binaries), apt's state, device nodes.
  for (const doc of fs.readdirSync(p('usr/share/doc'))) {
    const dir = p('usr/share/doc', doc);
    if (!fs.lstatSync(dir).isDirectory()) continue;
    for (const f of fs.readdirSync(dir)) if (f !== 'copyright') fs.rmSync(path.join(dir, f), { recursive: true, force: true });
  }
  for (const d of [
    'usr/share/man',
    'usr/share/info',
    'usr/share/locale',
    'usr/share/lintian',
    'usr/share/bash-completion',
    'var/cache',
    'var/lib/apt',
    'var/log',
    'dev',
  ]) {
    fs.rmSync(p(d), { recursive: true, force: true });
    fs.mkdirSync(p(d), { recursive: true, mode: 0o755 });
  }
  fs.chmodSync(p('tmp'), 0o1777);
}

/** The npm packages in the image: those esbuild bundled (its metafiles), and koffi, shipped as it is. */
function npmPackages(): NpmPackage[] {
  const lock = JSON.parse(fs.readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { version?: string; integrity?: string; license?: string }>;
  };
  const metas = ['kpr-agent.meta.json', 'kpr.meta.json'].map(
    (f) => JSON.parse(fs.readFileSync(path.join(root, 'dist', f), 'utf8')) as { inputs: Record<string, unknown> },
  );
  const bundled = bundledNpmPackages(metas.flatMap((m) => Object.keys(m.inputs)));
  const koffi = 'node_modules/koffi';
  return [...bundled.filter((dir) => dir !== koffi), koffi].map((dir) => {
    const entry = lock.packages[dir];
    if (!entry?.version) throw new Error(`${dir} is bundled but not in package-lock.json`);
    return {
      name: dir.slice(dir.lastIndexOf('node_modules/') + 'node_modules/'.length),
      version: entry.version,
      integrity: entry.integrity,
      license: entry.license,
      how: dir === koffi ? 'installed' : 'bundled',
    };
  });
}

/** kpr itself: /opt/kpr, and Node at /usr/local/bin/node. */
function addKpr(rootfs: string, arch: ImageArch, nodeDir: string, version: string): void {
  const opt = (...s: string[]) => path.join(rootfs, 'opt/kpr', ...s);
  copy(path.join(nodeDir, 'bin/node'), path.join(rootfs, 'usr/local/bin/node'), 0o755);
  copy(path.join(nodeDir, 'LICENSE'), path.join(rootfs, 'usr/share/doc/node/copyright'), 0o644);
  // findRepoRoot() looks for it; "type": "module" is what the .mjs bundles do not need but koffi's index.js is CommonJS.
  fs.mkdirSync(opt(), { recursive: true });
  fs.writeFileSync(opt('package.json'), `${JSON.stringify({ name: 'kpr', version, private: true, license: 'Apache-2.0' }, null, 2)}\n`);
  for (const f of ['kpr-agent.mjs', 'kpr.mjs', 'build-info.json']) copy(path.join(root, 'dist', f), opt('dist', f), 0o644);
  for (const f of ['kpr', 'kpr-agent']) copy(path.join(root, 'bin', f), opt('bin', f), 0o755);
  const outputs = archOutputs(arch);
  for (const f of fs.readdirSync(outputs).filter((n) => n.endsWith('.bpf.o') || n === 'libkpr_batch_writer.so'))
    copy(path.join(outputs, f), opt('build', f), 0o644);
  const koffi = path.join(root, 'node_modules/koffi');
  for (const f of ['package.json', 'index.js', 'indirect.js', 'LICENSE.txt']) copy(path.join(koffi, f), opt('node_modules/koffi', f), 0o644);
  copy(path.join(koffi, 'build/koffi', KOFFI_TRIPLET[arch], 'koffi.node'), opt('node_modules/koffi/build/koffi', KOFFI_TRIPLET[arch], 'koffi.node'), 0o755);
}

/** Every timestamp SOURCE_DATE_EPOCH, then a sorted, numeric-owner tar: the layer. */
function layerTar(rootfs: string, tarFile: string, epoch: number): void {
  run('find', [rootfs, '-exec', 'touch', '--no-dereference', `--date=@${epoch}`, '{}', '+']);
  const entries = fs.readdirSync(rootfs).sort();
  run('tar', [
    '--create',
    '--file',
    tarFile,
    '--directory',
    rootfs,
    '--sort=name',
    '--format=posix',
    '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
    `--mtime=@${epoch}`,
    '--numeric-owner',
    '--no-acls',
    '--no-xattrs',
    '--no-selinux',
    '--',
    ...entries,
  ]);
}

function gzip(src: string, dst: string): void {
  const fd = fs.openSync(dst, 'w');
  try {
    const r = spawnSync('gzip', ['-n', '-6', '-c', src], { stdio: ['ignore', fd, 'inherit'] });
    if (r.status !== 0) throw new Error(`gzip ${src}: exit ${r.status}`);
  } finally {
    fs.closeSync(fd);
  }
}

class Layout {
  constructor(readonly dir: string) {
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(path.join(dir, 'blobs/sha256'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'oci-layout'), canonicalJson(OCI_LAYOUT));
  }

  blobPath(digest: string): string {
    return path.join(this.dir, 'blobs/sha256', digest.replace(/^sha256:/, ''));
  }

  addJson(mediaType: string, doc: object): Descriptor {
    const bytes = canonicalJson(doc);
    const d = describeBlob(mediaType, bytes);
    fs.writeFileSync(this.blobPath(d.digest), bytes);
    return d;
  }

  /** Moves a file in as a blob. */
  addFile(mediaType: string, file: string): Descriptor {
    const digest = `sha256:${out('sha256sum', [file]).split(' ')[0]}`;
    const size = fs.statSync(file).size;
    fs.renameSync(file, this.blobPath(digest));
    return { mediaType, digest, size };
  }

  setIndex(manifests: Descriptor[]): void {
    fs.writeFileSync(path.join(this.dir, 'index.json'), canonicalJson(imageIndex(manifests)));
  }

  /** The layout as an oci-archive: a tar of it, as reproducible as the layer. */
  archive(file: string, epoch: number, blobs?: Descriptor[]): void {
    const names = blobs ? [...new Set(blobs.map((b) => `blobs/sha256/${b.digest.slice('sha256:'.length)}`))].sort() : ['blobs'];
    run('tar', [
      '--create',
      '--file',
      file,
      '--directory',
      this.dir,
      '--sort=name',
      '--format=posix',
      '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
      `--mtime=@${epoch}`,
      '--owner=0',
      '--group=0',
      '--numeric-owner',
      '--mode=a+r,u+w',
      '--',
      'oci-layout',
      'index.json',
      ...names,
    ]);
  }
}

interface ArchResult {
  arch: ImageArch;
  manifest: Descriptor;
  blobs: Descriptor[];
  archive: string;
  sbom: string;
  packages: { debian: number; npm: number };
  layerBytes: number;
}

/** What every architecture's image shares: read once per build. */
interface SharedInputs {
  nodeEnv: NodeEnv;
  npm: NpmPackage[];
  agentNodeFlags: string[];
}

function buildArch(arch: ImageArch, meta: ImageMeta, epoch: number, outDir: string, layout: Layout, shared: SharedInputs): ArchResult {
  const work = path.join(outDir, 'work', arch);
  const rootfs = path.join(work, 'rootfs');
  fs.mkdirSync(work, { recursive: true });
  console.error(`kpr image: ${arch}: Debian ${SUITE} packages (mmdebstrap)`);
  const debs = debianRoot(arch, rootfs, epoch);
  configureRoot(rootfs, debs);
  const nodeDir = path.join(work, 'node');
  run(path.join(root, 'tools/fetch-node.sh'), [NODE_ARCH[arch], nodeDir]);
  addKpr(rootfs, arch, nodeDir, meta.version);
  const { nodeEnv, npm } = shared;
  const sbom = spdxDocument({
    imageName: meta.name,
    version: meta.version,
    revision: meta.revision,
    arch,
    created: meta.created,
    distro: DISTRO,
    debs,
    npm,
    node: { version: nodeEnv.version, integrity: nodeEnv.integrity[NODE_ARCH[arch]], npmPackage: `node-linux-${NODE_ARCH[arch]}` },
  });
  const sbomText = `${JSON.stringify(sbom, null, 2)}\n`;
  fs.writeFileSync(path.join(rootfs, 'opt/kpr/sbom.spdx.json'), sbomText);
  const sbomFile = path.join(outDir, `kpr-${meta.version}-${arch}.spdx.json`);
  fs.writeFileSync(sbomFile, sbomText);

  console.error(`kpr image: ${arch}: layer`);
  const tarFile = path.join(work, 'layer.tar');
  layerTar(rootfs, tarFile, epoch);
  const diffId = `sha256:${out('sha256sum', [tarFile]).split(' ')[0]}`;
  gzip(tarFile, `${tarFile}.gz`);
  fs.rmSync(tarFile);
  const layer = layout.addFile(MEDIA_TYPE.layerGzip, `${tarFile}.gz`);
  const config = layout.addJson(
    MEDIA_TYPE.config,
    imageConfig(
      meta,
      arch,
      {
        // Not a shell: node itself is PID 1 and gets the runtime's signals.
        entrypoint: ['/usr/local/bin/node', ...shared.agentNodeFlags, '/opt/kpr/dist/kpr-agent.mjs'],
        env: [ENV_PATH, 'MALLOC_ARENA_MAX=1'],
        workingDir: '/opt/kpr',
        user: '0:0',
      },
      [diffId],
    ),
  );
  const manifest = { ...layout.addJson(MEDIA_TYPE.manifest, imageManifest(meta, config, [layer])), platform: { architecture: arch, os: 'linux' } };

  // One architecture's archive: its own layout with only its blobs.
  const single = new Layout(path.join(work, 'layout'));
  for (const b of [config, layer, { ...manifest, platform: undefined }]) fs.copyFileSync(layout.blobPath(b.digest), single.blobPath(b.digest));
  single.setIndex([{ ...manifest, annotations: refAnnotations(meta) }]);
  const archive = path.join(outDir, `kpr-${meta.version}-${arch}.oci.tar`);
  single.archive(archive, epoch);
  fs.rmSync(work, { recursive: true, force: true });
  return {
    arch,
    manifest,
    blobs: [config, layer, manifest],
    archive,
    sbom: sbomFile,
    packages: { debian: debs.length, npm: npm.length },
    layerBytes: layer.size,
  };
}

function main(): void {
  const { values } = parseArgs({
    options: { arches: { type: 'string', default: IMAGE_ARCHES.join(',') }, out: { type: 'string', default: path.join(root, 'build/image') } },
  });
  const arches = values.arches!.split(',').filter(Boolean) as ImageArch[];
  for (const a of arches) if (!IMAGE_ARCHES.includes(a)) throw new Error(`unknown architecture ${a} (${IMAGE_ARCHES.join(', ')})`);
  const outDir = path.resolve(values.out!);
  fs.mkdirSync(outDir, { recursive: true });
  const version = (JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string }).version;
  const revision = (JSON.parse(fs.readFileSync(path.join(root, 'dist/build-info.json'), 'utf8')) as { commit: string }).commit;
  const epoch = Number(process.env.SOURCE_DATE_EPOCH ?? out('git', ['-C', root, 'log', '-1', '--format=%ct']).trim());
  if (!Number.isInteger(epoch) || epoch <= 0) throw new Error('SOURCE_DATE_EPOCH: set it, or build from a git checkout (the commit time is used)');
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { repository?: { url?: string } };
  const source = process.env.KPR_IMAGE_SOURCE ?? pkg.repository?.url ?? 'unknown';
  const meta: ImageMeta = { name: IMAGE_NAME, version, revision, source, created: new Date(epoch * 1000) };

  const layout = new Layout(path.join(outDir, 'oci'));
  const shared: SharedInputs = {
    nodeEnv: readNodeEnv(fs.readFileSync(path.join(root, 'tools/node.env'), 'utf8')),
    npm: npmPackages(),
    agentNodeFlags: agentNodeFlagsOf(fs.readFileSync(path.join(root, 'bin/kpr-agent'), 'utf8')),
  };
  const results = arches.map((a) => buildArch(a, meta, epoch, outDir, layout, shared));
  const index = layout.addJson(
    MEDIA_TYPE.index,
    imageIndex(
      results.map((r) => r.manifest),
      { 'org.opencontainers.image.version': meta.version, 'org.opencontainers.image.revision': meta.revision },
    ),
  );
  layout.setIndex([{ ...index, annotations: refAnnotations(meta) }]);
  const multi = path.join(outDir, `kpr-${meta.version}.oci.tar`);
  layout.archive(multi, epoch);

  const summary = {
    image: `${meta.name}:${meta.version}`,
    revision,
    created: meta.created.toISOString(),
    index: index.digest,
    layout: layout.dir,
    archive: multi,
    arches: Object.fromEntries(
      results.map((r) => [
        r.arch,
        {
          manifest: r.manifest.digest,
          archive: r.archive,
          archiveSha256: out('sha256sum', [r.archive]).split(' ')[0],
          sbom: r.sbom,
          layerBytes: r.layerBytes,
          packages: r.packages,
        },
      ]),
    ),
  };
  fs.writeFileSync(path.join(outDir, 'image.json'), `${JSON.stringify(summary, null, 2)}\n`);
  console.log(`image ${summary.image}  index ${index.digest}`);
  console.log('arch    manifest digest                                                           layer (gzip)  Debian pkgs  npm pkgs  archive');
  for (const r of results) {
    console.log(
      `${r.arch.padEnd(7)} ${r.manifest.digest}  ${(r.layerBytes / 1048576).toFixed(1).padStart(8)} MiB  ${String(r.packages.debian).padStart(11)}  ${String(r.packages.npm).padStart(8)}  ${path.relative(process.cwd(), r.archive)}`,
    );
  }
  console.log(
    `multi-arch: ${path.relative(process.cwd(), multi)} (skopeo copy --all oci-archive:${path.relative(process.cwd(), multi)} docker://REGISTRY/kpr:${meta.version})`,
  );
}

if (import.meta.url === `file://${process.argv[1]}`) main();
