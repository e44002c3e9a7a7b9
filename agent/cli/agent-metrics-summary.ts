/**
 * What `kpr status` tells from the agent's /metrics: the last successful
 * sync and the sync results, the API server as the agent sees it (requests
 * by status code, each cache's age, relists) and the kernel features in
 * effect. Pure: it works on parsed samples, whoever scraped them.
 */
import type { PromSample } from './agent-http.js';

export interface MetricsSummary {
  version?: string;
  /** The last successful sync (kubeproxy_sync_proxy_rules_last_timestamp_seconds), ISO time; absent before the first. */
  lastSync?: string;
  lastSyncAgeSeconds?: number;
  /** kpr_syncs_total summed by result. */
  syncs: { ok: number; error: number };
  /** Failed syncs by trigger (kpr_syncs_total{result="error"}). */
  syncErrorsByTrigger: Record<string, number>;
  /** rest_client_requests_total summed by code ("<error>": no answer). */
  apiRequestsByCode: Record<string, number>;
  /** kpr_k8s_cache_age_seconds by kind: seconds since the API server last confirmed the cache. */
  cacheAgeSeconds: Record<string, number>;
  /** kpr_k8s_relists_total, "kind/reason" → count (non-zero only). */
  relists: Record<string, number>;
  /** kpr_kernel_feature. */
  kernelFeatures: Array<{ feature: string; state: string; fallback?: string }>;
}

function sumBy(samples: PromSample[], name: string, label: (s: PromSample) => string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples) if (s.name === name) out[label(s)] = (out[label(s)] ?? 0) + s.value;
  return out;
}

export function summarizeMetrics(samples: PromSample[], now: Date): MetricsSummary {
  const last = samples.find((s) => s.name === 'kubeproxy_sync_proxy_rules_last_timestamp_seconds')?.value;
  const byResult = sumBy(samples, 'kpr_syncs_total', (s) => s.labels.result ?? '');
  const errors = sumBy(
    samples.filter((s) => s.labels.result === 'error'),
    'kpr_syncs_total',
    (s) => s.labels.trigger ?? '',
  );
  const relists = sumBy(samples, 'kpr_k8s_relists_total', (s) => `${s.labels.kind}/${s.labels.reason}`);
  for (const [k, v] of Object.entries(relists)) if (v === 0) delete relists[k];
  const version = samples.find((s) => s.name === 'kpr_build_info')?.labels.version;
  return {
    ...(version ? { version } : {}),
    ...(last ? { lastSync: new Date(last * 1000).toISOString(), lastSyncAgeSeconds: Math.max(0, Math.round(now.getTime() / 1000 - last)) } : {}),
    syncs: { ok: byResult.ok ?? 0, error: byResult.error ?? 0 },
    syncErrorsByTrigger: Object.fromEntries(Object.entries(errors).filter(([, v]) => v > 0)),
    apiRequestsByCode: sumBy(samples, 'rest_client_requests_total', (s) => s.labels.code ?? ''),
    cacheAgeSeconds: sumBy(samples, 'kpr_k8s_cache_age_seconds', (s) => s.labels.kind ?? ''),
    relists,
    kernelFeatures: samples
      .filter((s) => s.name === 'kpr_kernel_feature')
      .map((s) => ({ feature: s.labels.feature, state: s.labels.state, ...(s.labels.fallback ? { fallback: s.labels.fallback } : {}) })),
  };
}

const counts = (r: Record<string, number>) =>
  Object.entries(r)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');

/** The status lines of a summary. */
export function formatMetricsSummary(m: MetricsSummary): string[] {
  const out: string[] = [];
  out.push(
    m.lastSync
      ? `last sync ${m.lastSync} (${m.lastSyncAgeSeconds}s ago); syncs ok ${m.syncs.ok}, failed ${m.syncs.error}${m.syncs.error ? ` (${counts(m.syncErrorsByTrigger)})` : ''}`
      : `last sync none succeeded yet; syncs ok ${m.syncs.ok}, failed ${m.syncs.error}`,
  );
  const requests = Object.keys(m.apiRequestsByCode).length ? counts(m.apiRequestsByCode) : 'none yet';
  const failed = Object.entries(m.apiRequestsByCode)
    .filter(([code]) => code === '<error>' || Number(code) >= 500)
    .reduce((n, [, v]) => n + v, 0);
  out.push(`apiserver requests by code: ${requests}${failed ? ` (${failed} without a good answer)` : ''}`);
  const caches = Object.entries(m.cacheAgeSeconds)
    .map(([kind, age]) => `${kind} ${age.toFixed(1)}s`)
    .join(', ');
  out.push(`watch     caches confirmed: ${caches || 'none yet'}; relists: ${counts(m.relists) || 'none'}`);
  out.push(`kernel    ${m.kernelFeatures.map((f) => `${f.feature} ${f.state}${f.fallback ? ` (${f.fallback})` : ''}`).join(', ') || 'features not reported'}`);
  return out;
}
