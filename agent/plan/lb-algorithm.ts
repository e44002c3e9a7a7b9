/**
 * Which backend selection algorithm a Service's frontends use (rule 40 of
 * docs/semantics.md): the Service's annotation (kpr.dev/lb-algorithm, or
 * Cilium's service.cilium.io/lb-algorithm), else the node-wide default
 * (--lb-algorithm). Pure. An annotation value this agent does not know is
 * reported (a SkippedObject: a log line and kpr_sync_skipped_objects) and
 * the node default used: the Service stays served.
 */
import { ANNOTATION_CILIUM_LB_ALGORITHM, ANNOTATION_LB_ALGORITHM } from '../k8s/labels.js';
import type { SkippedObject } from './types.js';

export const LB_ALGORITHMS = ['random', 'maglev'] as const;
export type LbAlgorithm = (typeof LB_ALGORITHMS)[number];

export const isLbAlgorithm = (v: unknown): v is LbAlgorithm => v === 'random' || v === 'maglev';

/**
 * The algorithm of the Service `key` with `annotations`, over `nodeDefault`.
 * kpr's annotation wins over Cilium's when both are set. Values are matched
 * as written, after trimming: Cilium's are lower case too.
 */
export function lbAlgorithmOf(
  key: string,
  annotations: Readonly<Record<string, string>> | undefined,
  nodeDefault: LbAlgorithm,
  skipped: SkippedObject[],
): LbAlgorithm {
  if (!annotations) return nodeDefault;
  for (const name of [ANNOTATION_LB_ALGORITHM, ANNOTATION_CILIUM_LB_ALGORITHM]) {
    const raw = annotations[name];
    if (raw === undefined) continue;
    const v = typeof raw === 'string' ? raw.trim() : raw;
    if (isLbAlgorithm(v)) return v;
    skipped.push({
      object: `Service ${key}`,
      reason: `annotation ${name}: ${JSON.stringify(String(raw).slice(0, 64))} is not an algorithm (${LB_ALGORITHMS.join(' or ')}); the node's default ${nodeDefault} is used`,
    });
    return nodeDefault;
  }
  return nodeDefault;
}
