/**
 * The OCI image documents of `make image` (image-spec v1.1): the image
 * config, the manifest of one architecture, the index that names the
 * manifests, and the layout marker. Pure: the caller hashes and writes the
 * bytes. Every document is serialized with its keys in a fixed order, so one
 * set of inputs always gives the same bytes and so the same digest.
 */
import { createHash } from 'node:crypto';

export const MEDIA_TYPE = {
  index: 'application/vnd.oci.image.index.v1+json',
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  layerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
} as const;

export const OCI_LAYOUT = { imageLayoutVersion: '1.0.0' };

/** Debian's architecture names are the OCI platform's (amd64, arm64). */
export type ImageArch = 'amd64' | 'arm64';
export const IMAGE_ARCHES: readonly ImageArch[] = ['amd64', 'arm64'];

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: { architecture: string; os: string };
  annotations?: Record<string, string>;
}

export interface ImageMeta {
  /** The image's repository name, e.g. localhost/kpr. */
  name: string;
  /** package.json's version: the tag. */
  version: string;
  /** The commit the image was built from. */
  revision: string;
  /** Where the source lives (org.opencontainers.image.source). */
  source: string;
  /** SOURCE_DATE_EPOCH: every timestamp in the image. */
  created: Date;
}

export function sha256(bytes: Buffer | string): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

/** JSON with object keys sorted at every level: the same document, the same bytes. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value as object)
        .sort()
        .map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}

export function describeBlob(mediaType: string, bytes: Buffer | string): Descriptor {
  return { mediaType, digest: sha256(bytes), size: Buffer.byteLength(bytes) };
}

/** The labels (config) and annotations (manifest, index) every image carries. */
export function imageAnnotations(meta: ImageMeta): Record<string, string> {
  return {
    'org.opencontainers.image.title': 'kpr',
    'org.opencontainers.image.description': 'kpr: an eBPF replacement for kube-proxy (agent and CLI)',
    'org.opencontainers.image.version': meta.version,
    'org.opencontainers.image.revision': meta.revision,
    'org.opencontainers.image.source': meta.source,
    'org.opencontainers.image.licenses': 'Apache-2.0',
    'org.opencontainers.image.created': meta.created.toISOString(),
    'org.opencontainers.image.base.name': 'debian:bookworm (mmdebstrap, extract variant)',
  };
}

export interface RuntimeConfig {
  entrypoint: string[];
  env: string[];
  workingDir: string;
  user: string;
}

/** The image config: how a runtime starts the image, and which uncompressed layers make its root. */
export function imageConfig(meta: ImageMeta, arch: ImageArch, runtime: RuntimeConfig, diffIds: string[]): object {
  return {
    architecture: arch,
    os: 'linux',
    created: meta.created.toISOString(),
    config: {
      User: runtime.user,
      Entrypoint: runtime.entrypoint,
      Env: runtime.env,
      WorkingDir: runtime.workingDir,
      Labels: imageAnnotations(meta),
    },
    rootfs: { type: 'layers', diff_ids: diffIds },
    history: [{ created: meta.created.toISOString(), created_by: 'make image (image/build.ts)' }],
  };
}

export function imageManifest(meta: ImageMeta, config: Descriptor, layers: Descriptor[]): object {
  return {
    schemaVersion: 2,
    mediaType: MEDIA_TYPE.manifest,
    config,
    layers,
    annotations: imageAnnotations(meta),
  };
}

/** The references a layout's index gives an image: the tag (OCI), and the full name containerd imports it as. */
export function refAnnotations(meta: ImageMeta): Record<string, string> {
  return {
    'org.opencontainers.image.ref.name': meta.version,
    'io.containerd.image.name': `${meta.name}:${meta.version}`,
  };
}

/** An index listing manifests (one per architecture) or one nested index. */
export function imageIndex(manifests: Descriptor[], annotations?: Record<string, string>): object {
  const index: Record<string, unknown> = { schemaVersion: 2, mediaType: MEDIA_TYPE.index, manifests };
  if (annotations) index.annotations = annotations;
  return index;
}
