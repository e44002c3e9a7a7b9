/**
 * The chart as the image test runs it, rendered by the real helm on the
 * host (the guest shares the checkout read-only): docs/platforms.md's
 * values-kubeadm.yaml over the chart's defaults, the image pointed at the
 * one `make image` built (an operator's registry and tag), and the
 * uninstall hook on (cleanupOnUninstall.enabled). The broken variants
 * change one setting each, for the test that shows the harness fails.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { repoRoot } from '../../sandbox/repo.js';
import { render, type K8sObject } from '../chart/render.js';

export type Variant = 'kubeadm' | 'no-bpf-privilege' | 'no-mount-bpffs';

const defaults = YAML.parse(readFileSync(path.join(repoRoot, 'charts', 'kpr', 'values.yaml'), 'utf8')) as { securityContext: { capabilities: string[] } };

/** The values each variant changes (over values-kubeadm.yaml and the image). */
export const VARIANTS: Record<Variant, { values: Record<string, unknown>; what: string }> = {
  kubeadm: { values: {}, what: 'values-kubeadm.yaml over the defaults' },
  // Without BPF alone the agent still starts: CAP_SYS_ADMIN also allows bpf() (a kernel rule), so both go.
  'no-bpf-privilege': {
    values: { securityContext: { capabilities: defaults.securityContext.capabilities.filter((c) => c !== 'BPF' && c !== 'SYS_ADMIN') } },
    what: 'securityContext.capabilities without BPF and SYS_ADMIN',
  },
  'no-mount-bpffs': { values: { mountBpffs: { enabled: false } }, what: 'mountBpffs.enabled=false on a host without bpffs' },
};

/** docs/platforms.md's values file `name` (a ```yaml block starting with `# name`). */
export function platformsValues(name: string): Record<string, unknown> {
  const text = readFileSync(path.join(repoRoot, 'docs', 'platforms.md'), 'utf8');
  const m = new RegExp('```yaml\\n# ' + name.replace('.', '\\.') + '\\n([\\s\\S]*?)```').exec(text);
  if (!m) throw new Error(`docs/platforms.md has no ${name} block`);
  return YAML.parse(m[1]) as Record<string, unknown>;
}

function merge(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const out = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const cur = out[k];
    out[k] =
      v && typeof v === 'object' && !Array.isArray(v) && cur && typeof cur === 'object' && !Array.isArray(cur)
        ? merge(cur as Record<string, unknown>, v as Record<string, unknown>)
        : v;
  }
  return out;
}

/** The chart's objects for a variant, with the image `repository:tag`. */
export function renderVariant(variant: Variant, image: { repository: string; tag: string }): K8sObject[] {
  const values = merge(merge(platformsValues('values-kubeadm.yaml'), { image, cleanupOnUninstall: { enabled: true } }), VARIANTS[variant].values);
  return render(values);
}

export function writeRendering(objs: K8sObject[]): string {
  return objs.map((o) => YAML.stringify(o)).join('---\n');
}

export function readRendering(file: string): K8sObject[] {
  return YAML.parseAllDocuments(readFileSync(file, 'utf8'))
    .map((d) => d.toJS())
    .filter(Boolean) as K8sObject[];
}
