/**
 * One JSON request to the API server through a KubeConfig (its TLS, token,
 * exec or OIDC auth), for the CLI's few writes (`kpr cleanup-nodes`). The
 * agent itself only lists and watches (list-page.ts, reflector.ts).
 */
import fetch from 'node-fetch';
import type { KubeConfig } from '@kubernetes/client-node';

export interface RestAnswer {
  status: number;
  /** The parsed JSON body, or undefined when it was not JSON. */
  body: unknown;
}

/** A Kubernetes Status message of an answer, or its status line. */
export function answerMessage(a: RestAnswer): string {
  const message = (a.body as { message?: unknown } | undefined)?.message;
  return typeof message === 'string' ? `HTTP ${a.status}: ${message}` : `HTTP ${a.status}`;
}

export async function restRequest(kc: KubeConfig, method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown): Promise<RestAnswer> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('kubeconfig has no current cluster');
  const init = await kc.applyToFetchOptions({ method });
  const headers = init.headers as { set(name: string, value: string): void };
  headers.set('Accept', 'application/json');
  if (body !== undefined) {
    headers.set('Content-Type', 'application/json');
    (init as { body?: string }).body = JSON.stringify(body);
  }
  const res = await fetch(cluster.server.replace(/\/+$/, '') + path, init);
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, body: parsed };
}
