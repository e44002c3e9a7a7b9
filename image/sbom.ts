/**
 * The image's SBOM: an SPDX 2.3 JSON document naming every Debian package
 * unpacked into the root filesystem, the Node.js binary, and every npm
 * package whose code is inside the image (bundled into dist/kpr-agent.mjs or
 * dist/kpr.mjs, as esbuild's metafiles say, or koffi, shipped as it is).
 * Pure: the same inputs give the same document (the namespace is derived
 * from the content, the creation time is SOURCE_DATE_EPOCH).
 */
import { createHash } from 'node:crypto';
import { debPurl, type DebPackage } from './debian.js';

export interface NpmPackage {
  name: string;
  version: string;
  /** package-lock's integrity (sha512-base64), when known. */
  integrity?: string;
  license?: string;
  /** Where it is in the image: 'bundled' into a dist/*.mjs, or 'installed' under node_modules. */
  how: 'bundled' | 'installed';
}

export interface SbomInput {
  imageName: string;
  version: string;
  revision: string;
  arch: string;
  created: Date;
  distro: string;
  debs: DebPackage[];
  npm: NpmPackage[];
  node: { version: string; integrity: string; npmPackage: string };
}

interface SpdxPackage {
  SPDXID: string;
  name: string;
  versionInfo: string;
  downloadLocation: string;
  filesAnalyzed: false;
  supplier?: string;
  licenseConcluded: string;
  licenseDeclared: string;
  copyrightText: string;
  checksums?: Array<{ algorithm: string; checksumValue: string }>;
  externalRefs: Array<{ referenceCategory: string; referenceType: string; referenceLocator: string }>;
  comment?: string;
  primaryPackagePurpose?: string;
}

const spdxId = (kind: string, name: string, version: string) => `SPDXRef-${kind}-${`${name}-${version}`.replace(/[^A-Za-z0-9.-]/g, '-')}`;

function sha512Hex(integrity: string | undefined): Array<{ algorithm: string; checksumValue: string }> | undefined {
  const m = /^sha512-(.+)$/.exec(integrity ?? '');
  return m ? [{ algorithm: 'SHA512', checksumValue: Buffer.from(m[1], 'base64').toString('hex') }] : undefined;
}

const npmPurl = (name: string, version: string) => `pkg:npm/${name.startsWith('@') ? `%40${name.slice(1)}` : name}@${version}`;

export function spdxDocument(input: SbomInput): object {
  const image: SpdxPackage = {
    SPDXID: 'SPDXRef-Image',
    name: input.imageName,
    versionInfo: input.version,
    downloadLocation: 'NOASSERTION',
    filesAnalyzed: false,
    licenseConcluded: 'NOASSERTION',
    licenseDeclared: 'Apache-2.0',
    copyrightText: 'NOASSERTION',
    externalRefs: [
      { referenceCategory: 'PACKAGE-MANAGER', referenceType: 'purl', referenceLocator: `pkg:oci/kpr@${encodeURIComponent(input.version)}?arch=${input.arch}` },
    ],
    comment: `commit ${input.revision}`,
    primaryPackagePurpose: 'CONTAINER',
  };
  const debs: SpdxPackage[] = [...input.debs]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((p) => ({
      SPDXID: spdxId('deb', p.name, p.version),
      name: p.name,
      versionInfo: p.version,
      downloadLocation: 'NOASSERTION',
      filesAnalyzed: false,
      supplier: 'Organization: Debian',
      licenseConcluded: 'NOASSERTION',
      licenseDeclared: 'NOASSERTION',
      copyrightText: 'NOASSERTION',
      externalRefs: [{ referenceCategory: 'PACKAGE-MANAGER', referenceType: 'purl', referenceLocator: debPurl(p, input.distro) }],
      comment: `/usr/share/doc/${p.name}/copyright in the image`,
    }));
  const node: SpdxPackage = {
    SPDXID: spdxId('node', 'node', input.node.version),
    name: 'node',
    versionInfo: input.node.version,
    downloadLocation: `https://registry.npmjs.org/${input.node.npmPackage}/-/${input.node.npmPackage}-${input.node.version}.tgz`,
    filesAnalyzed: false,
    licenseConcluded: 'NOASSERTION',
    licenseDeclared: 'MIT',
    copyrightText: 'NOASSERTION',
    checksums: sha512Hex(input.node.integrity),
    externalRefs: [{ referenceCategory: 'PACKAGE-MANAGER', referenceType: 'purl', referenceLocator: npmPurl(input.node.npmPackage, input.node.version) }],
    comment: '/usr/local/bin/node: the binary inside the npm registry package named in the purl',
  };
  const npm: SpdxPackage[] = [...input.npm]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.version < b.version ? -1 : 1))
    .map((p) => {
      const pkg: SpdxPackage = {
        SPDXID: spdxId('npm', p.name, p.version),
        name: p.name,
        versionInfo: p.version,
        downloadLocation: 'NOASSERTION',
        filesAnalyzed: false,
        licenseConcluded: 'NOASSERTION',
        licenseDeclared: p.license && /^[A-Za-z0-9.+-]+(?: (?:OR|AND) [A-Za-z0-9.+-]+)*$/.test(p.license) ? p.license : 'NOASSERTION',
        copyrightText: 'NOASSERTION',
        externalRefs: [{ referenceCategory: 'PACKAGE-MANAGER', referenceType: 'purl', referenceLocator: npmPurl(p.name, p.version) }],
        comment: p.how === 'bundled' ? 'bundled into /opt/kpr/dist/kpr-agent.mjs or kpr.mjs' : 'installed under /opt/kpr/node_modules',
      };
      const sums = sha512Hex(p.integrity);
      if (sums) pkg.checksums = sums;
      return pkg;
    });
  const packages = [image, ...debs, node, ...npm];
  const body = {
    spdxVersion: 'SPDX-2.3',
    dataLicense: 'CC0-1.0',
    SPDXID: 'SPDXRef-DOCUMENT',
    name: `${input.imageName}:${input.version} (${input.arch})`,
    creationInfo: { created: input.created.toISOString(), creators: ['Tool: kpr make image (image/build.ts)'] },
    packages,
    relationships: [
      { spdxElementId: 'SPDXRef-DOCUMENT', relationshipType: 'DESCRIBES', relatedSpdxElement: 'SPDXRef-Image' },
      ...packages.slice(1).map((p) => ({ spdxElementId: 'SPDXRef-Image', relationshipType: 'CONTAINS', relatedSpdxElement: p.SPDXID })),
    ],
  };
  const digest = createHash('sha256').update(JSON.stringify(body)).digest('hex');
  return { ...body, documentNamespace: `https://spdx.org/spdxdocs/kpr-${input.version}-${input.arch}-${digest}` };
}
