/**
 * Which nodes a DaemonSet's pod template runs on, by the scheduler's rules
 * for nodeSelector and required node affinity (k8s.io/component-helpers
 * nodeaffinity): every nodeSelector pair matches, AND at least one
 * nodeSelectorTerm matches (terms are ORed; a term is the AND of its
 * requirements; an empty term matches nothing). In and Gt/Lt need the label;
 * NotIn and DoesNotExist hold when it is absent. matchFields knows
 * metadata.name. A node's NoSchedule and NoExecute taints must each be
 * tolerated (a toleration matches by effect, key, and value unless its
 * operator is Exists; an empty key with Exists matches every taint);
 * PreferNoSchedule never keeps a pod out.
 */

export interface NodeSelectorRequirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist' | 'Gt' | 'Lt';
  values?: string[];
}

export interface NodeSelectorTerm {
  matchExpressions?: NodeSelectorRequirement[];
  matchFields?: NodeSelectorRequirement[];
}

export interface Toleration {
  key?: string;
  operator?: 'Exists' | 'Equal';
  value?: string;
  effect?: string;
}

export interface Taint {
  key: string;
  value?: string;
  effect: 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';
}

export interface PodPlacement {
  nodeSelector?: Record<string, string>;
  tolerations?: Toleration[];
  affinity?: { nodeAffinity?: { requiredDuringSchedulingIgnoredDuringExecution?: { nodeSelectorTerms?: NodeSelectorTerm[] } } };
}

export interface NodeModel {
  name: string;
  labels: Record<string, string>;
  taints?: Taint[];
}

function tolerates(t: Toleration, taint: Taint): boolean {
  if (t.effect && t.effect !== taint.effect) return false;
  if (t.operator === 'Exists') return !t.key || t.key === taint.key;
  return t.key === taint.key && (t.value ?? '') === (taint.value ?? '');
}

function requirementHolds(r: NodeSelectorRequirement, value: string | undefined): boolean {
  const values = r.values ?? [];
  switch (r.operator) {
    case 'In':
      return value !== undefined && values.includes(value);
    case 'NotIn':
      return value === undefined || !values.includes(value);
    case 'Exists':
      return value !== undefined;
    case 'DoesNotExist':
      return value === undefined;
    case 'Gt':
    case 'Lt': {
      if (value === undefined || !/^-?\d+$/.test(value) || values.length !== 1) return false;
      return r.operator === 'Gt' ? Number(value) > Number(values[0]) : Number(value) < Number(values[0]);
    }
    default:
      throw new Error(`unknown node selector operator ${String((r as { operator: unknown }).operator)}`);
  }
}

function termMatches(term: NodeSelectorTerm, node: NodeModel): boolean {
  const exprs = term.matchExpressions ?? [];
  const fields = term.matchFields ?? [];
  if (exprs.length === 0 && fields.length === 0) return false;
  return (
    exprs.every((r) => requirementHolds(r, node.labels[r.key])) &&
    fields.every((r) => {
      if (r.key !== 'metadata.name') throw new Error(`matchFields key ${r.key}: only metadata.name is supported`);
      return requirementHolds(r, node.name);
    })
  );
}

/** Whether a pod with this placement may run on `node`. */
export function podFitsNode(spec: PodPlacement, node: NodeModel): boolean {
  for (const [k, v] of Object.entries(spec.nodeSelector ?? {})) if (node.labels[k] !== v) return false;
  for (const taint of node.taints ?? []) {
    if (taint.effect !== 'PreferNoSchedule' && !(spec.tolerations ?? []).some((t) => tolerates(t, taint))) return false;
  }
  const terms = spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  if (terms === undefined) return true;
  return terms.some((t) => termMatches(t, node));
}
