/**
 * One page of a Kubernetes list (GET path?labelSelector&fieldSelector&limit&continue),
 * requested the way client-node's Watch requests its stream: the KubeConfig's
 * applyToFetchOptions (TLS, tokens, exec/OIDC auth, proxies) and node-fetch.
 *
 * The agent lists through this instead of client-node's generated CoreV1Api /
 * DiscoveryV1Api: those pull in the whole generated API surface (~3 MB of
 * code, ~60 MiB of RSS once loaded), for three GET requests. Items come back as
 * raw JSON; the caller types them with ObjectSerializer like watch events.
 */
import fetch from 'node-fetch';
import type { KubeConfig, KubernetesListObject, KubernetesObject } from '@kubernetes/client-node';
import { errorCode, serverHost, type ApiRequestObserver } from './api-requests.js';

export interface ListPageQuery {
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  continue?: string;
}

/** A non-200 answer; `code` / `statusCode` carry the HTTP status (410: the continue token expired). */
export class ListError extends Error {
  constructor(
    message: string,
    readonly code: number,
    readonly body: string,
  ) {
    super(message);
    this.name = 'ListError';
  }
  get statusCode(): number {
    return this.code;
  }
}

export function listUrl(server: string, path: string, q: ListPageQuery): URL {
  const url = new URL(server.replace(/\/+$/, '') + path);
  if (q.labelSelector) url.searchParams.set('labelSelector', q.labelSelector);
  if (q.fieldSelector) url.searchParams.set('fieldSelector', q.fieldSelector);
  if (q.limit) url.searchParams.set('limit', String(q.limit));
  if (q.continue) url.searchParams.set('continue', q.continue);
  return url;
}

/**
 * GETs one page; the list's metadata.continue is exposed as `_continue` as client-node's models do.
 * `signal` aborts the request (ClusterWatch.stop()). `observe` hears how the
 * request ended (rest_client_*), unless `signal` cut it.
 */
export async function listPage<T extends KubernetesObject>(
  kc: KubeConfig,
  path: string,
  q: ListPageQuery,
  signal?: AbortSignal,
  observe?: ApiRequestObserver,
): Promise<KubernetesListObject<T>> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('kubeconfig has no current cluster');
  const url = listUrl(cluster.server, path, q);
  const started = performance.now();
  const report = (code: string): void => {
    if (signal?.aborted || !observe) return;
    try {
      observe({ method: 'GET', host: serverHost(cluster.server), code, seconds: (performance.now() - started) / 1000 });
    } catch {
      // metrics never fail a list
    }
  };
  let res: Awaited<ReturnType<typeof fetch>> | undefined;
  let text: string;
  try {
    const init = await kc.applyToFetchOptions({ method: 'GET' });
    // node-fetch's own AbortSignal type differs from the global one only in name.
    if (signal) (init as { signal?: unknown }).signal = signal;
    res = await fetch(url, init);
    text = await res.text();
  } catch (err) {
    // An answer whose body broke off still counts with its status, as client-go's does.
    report(res ? String(res.status) : errorCode(undefined));
    throw err;
  }
  report(String(res.status));
  if (res.status !== 200) {
    let reason = text.slice(0, 300);
    try {
      reason = (JSON.parse(text) as { message?: string }).message ?? reason;
    } catch {
      // not a Status object; keep the raw text
    }
    throw new ListError(`list ${path}: HTTP ${res.status}: ${reason}`, res.status, text);
  }
  const list = JSON.parse(text) as KubernetesListObject<T> & { metadata?: { continue?: string; _continue?: string } };
  if (!Array.isArray(list.items)) throw new Error(`list ${path}: the answer has no items array`);
  if (list.metadata?.continue !== undefined) list.metadata._continue = list.metadata.continue;
  return list;
}
