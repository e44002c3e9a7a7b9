/**
 * One watch request of a reflector (agent/k8s/reflector.ts), through
 * client-node's Watch, and how it ended: closed by the server, cut by the
 * reflector (stopped), or no longer trusted (a relist reason: the request or
 * its stream failed, an event told so, or nothing arrived for noProgressMs).
 * The KubeConfig's request agent is kept so a cut also ends a request still
 * waiting for its response headers.
 */
import type * as http from 'node:http';
import { Watch, type KubeConfig } from '@kubernetes/client-node';
import { errorCode, serverHost, type ApiRequestObserver } from './api-requests.js';

/** Why a reflector listed: kpr_k8s_relists_total{reason}. 'initial': its first list; the others end a watch request (WatchOutcome). */
export type RelistReason = 'initial' | 'expired' | 'watch_error' | 'stale_event' | 'rv_backwards' | 'no_progress';

export type WatchOutcome =
  { kind: 'closed'; events: number; durationMs: number } | { kind: 'relist'; reason: RelistReason; error?: string; status?: number } | { kind: 'stopped' };

export interface WatchRequest {
  kubeConfig: KubeConfig;
  /** e.g. /api/v1/services */
  path: string;
  query: Record<string, string | number | boolean | undefined>;
  /** No event or bookmark for this long: the watch ends with no_progress. */
  noProgressMs: number;
  /** The clock (ms). */
  now: () => number;
  /** When the cache was last confirmed (ms); progress counts from there, or from the request's start. */
  lastConfirmed: () => number | undefined;
  /** Applies one event; returns why the watch is no longer trusted, if it is not. */
  onEvent: (type: string, obj: any) => WatchOutcome | undefined;
  /** rest_client_requests_total: once per request, when its response headers (or its failure) arrive. */
  observe?: ApiRequestObserver;
  /** Takes the function that cuts the request, and undefined once the request is over. */
  setCut: (cut: (() => void) | undefined) => void;
  /** The reflector was stopped: whatever ended the request, the outcome is "stopped". */
  stopped: () => boolean;
}

export function watchRequest(w: WatchRequest): Promise<WatchOutcome> {
  const started = w.now();
  let events = 0;
  let settled = false;
  let ctl: AbortController | undefined;
  let agent: http.Agent | undefined;
  let progressTimer: NodeJS.Timeout | undefined;
  return new Promise<WatchOutcome>((resolve) => {
    const finish = (out: WatchOutcome): void => {
      if (settled) return;
      settled = true;
      if (progressTimer) clearTimeout(progressTimer);
      w.setCut(undefined);
      ctl?.abort();
      agent?.destroy();
      resolve(w.stopped() ? { kind: 'stopped' } : out);
    };
    w.setCut(() => finish({ kind: 'stopped' }));
    const lastProgress = (): number => w.lastConfirmed() ?? started;
    const armProgress = (): void => {
      const wait = Math.max(0, lastProgress() + w.noProgressMs - w.now());
      progressTimer = setTimeout(() => {
        if (settled) return;
        if (w.now() - lastProgress() >= w.noProgressMs) {
          finish({ kind: 'relist', reason: 'no_progress', error: `no watch event or bookmark for ${w.noProgressMs} ms` });
        } else armProgress();
      }, wait);
      progressTimer.unref?.();
    };
    armProgress();

    // The watch's config: the real KubeConfig, except that we keep hold of the request's
    // agent so a cut can also end a request still waiting for its response headers.
    const kc = w.kubeConfig;
    const watchConfig = Object.create(kc) as KubeConfig;
    watchConfig.applyToFetchOptions = async (opts: http.RequestOptions) => {
      const init = await kc.applyToFetchOptions(opts);
      agent = init.agent as http.Agent | undefined;
      if (settled) agent?.destroy();
      return init;
    };
    // rest_client_requests_total: once per watch request, when its response headers (or its failure) arrive.
    let answered = false;
    const answer = (code: string): void => {
      if (answered) return;
      answered = true;
      w.observe?.({ method: 'GET', host: serverHost(kc.getCurrentCluster()?.server ?? ''), code });
    };
    const onEvent = (type: string, obj: any): void => {
      if (settled) return;
      events++;
      const out = w.onEvent(type, obj);
      if (out) finish(out);
    };
    const done = (err: any): void => {
      // client-node's Watch calls done(error with statusCode) for a non-200 answer before watch() resolves,
      // and done(error) without one when the request itself failed.
      if (err) answer(errorCode(err));
      if (err) finish({ kind: 'relist', reason: 'watch_error', error: String(err?.message ?? err), status: err?.statusCode ?? err?.code });
      else finish({ kind: 'closed', events, durationMs: w.now() - started });
    };
    new Watch(watchConfig)
      .watch(w.path, w.query, onEvent, done)
      .then((c) => {
        answer('200');
        ctl = c;
        if (settled) c.abort();
      })
      .catch((err: any) => done(err ?? new Error('watch failed')));
  });
}
