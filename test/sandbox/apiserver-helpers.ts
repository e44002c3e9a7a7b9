/** Raw-HTTP helpers for exercising the sandbox API server the way a client would. */
import * as http from 'node:http';

export interface HttpResult {
  status: number;
  body: any;
}

export async function request(base: string, method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<HttpResult> {
  const res = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { 'content-type': contentType },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

export interface WatchEvent {
  type: string;
  object: any;
}

export interface WatchStream {
  status: number;
  headers: http.IncomingHttpHeaders;
  events: WatchEvent[];
  /** Resolves when the server ends the stream. */
  ended: Promise<void>;
  /** Waits until `n` events have arrived (or throws after timeoutMs). */
  waitForCount(n: number, timeoutMs?: number): Promise<WatchEvent[]>;
  waitFor(pred: (e: WatchEvent) => boolean, timeoutMs?: number): Promise<WatchEvent>;
  close(): void;
}

/** Opens a watch (GET with the given query) and collects newline-delimited JSON events. */
export function openWatch(base: string, path: string): Promise<WatchStream> {
  return new Promise((resolve, reject) => {
    const req = http.get(base + path, (res) => {
      const events: WatchEvent[] = [];
      const waiters = new Set<() => void>();
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buf += chunk;
        let i: number;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line.trim()) events.push(JSON.parse(line));
        }
        for (const w of [...waiters]) w();
      });
      const ended = new Promise<void>((r) => res.on('close', () => r()));
      const until = <T>(check: () => T | undefined, timeoutMs: number, what: string): Promise<T> =>
        new Promise((ok, fail) => {
          const tryIt = (): boolean => {
            const v = check();
            if (v === undefined) return false;
            clearTimeout(t);
            waiters.delete(w);
            ok(v);
            return true;
          };
          const w = (): void => void tryIt();
          const t = setTimeout(() => {
            waiters.delete(w);
            fail(new Error(`timed out waiting for ${what}; got ${JSON.stringify(events.map((e) => e.type))}`));
          }, timeoutMs);
          waiters.add(w);
          tryIt();
        });
      resolve({
        status: res.statusCode ?? 0,
        headers: res.headers,
        events,
        ended,
        waitForCount: (n, timeoutMs = 2000) => until(() => (events.length >= n ? events.slice(0, n) : undefined), timeoutMs, `${n} events`),
        waitFor: (pred, timeoutMs = 2000) => until(() => events.find(pred), timeoutMs, 'matching event'),
        close: () => req.destroy(),
      });
    });
    req.on('error', (e) => {
      if ((e as NodeJS.ErrnoException).code !== 'ECONNRESET') reject(e);
    });
  });
}

export function svc(name: string, ns = 'default', extra: { labels?: Record<string, string>; spec?: any } = {}): any {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: ns, labels: extra.labels },
    spec: { ports: [{ name: 'http', port: 80, targetPort: 8080 }], selector: { app: name }, ...extra.spec },
  };
}

export function slice(name: string, service: string | undefined, ips: string[], ns = 'default', labels: Record<string, string> = {}): any {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: ns, labels: { ...(service ? { 'kubernetes.io/service-name': service } : {}), ...labels } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
  };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
