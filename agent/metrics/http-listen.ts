/**
 * Bind addresses ("host:port", "[v6]:port", kube-proxy's format) and a listen
 * that, like kube-proxy's health and metrics servers, keeps retrying every 5 s
 * instead of taking the proxy down when the port is busy.
 */
import { isIP } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from '../log.js';

export interface BindAddress {
  host: string;
  port: number;
}

/** Parses "0.0.0.0:10256", "[::]:10256", "127.0.0.1:0"; "" (disabled) gives undefined. */
export function parseBindAddress(text: string, flag: string): BindAddress | undefined {
  if (text === '') return undefined;
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text);
  const host = m?.[1] ?? m?.[2];
  const port = Number(m?.[3]);
  if (!m || !host || !isIP(host) || (m[1] !== undefined && isIP(host) !== 6) || port > 65535) {
    throw new Error(`invalid ${flag} "${text}" (IP:port, e.g. 0.0.0.0:10256 or [::]:10256; empty disables)`);
  }
  return { host, port };
}

export function formatAddress(host: string, port: number): string {
  return isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;
}

const RETRY_MS = 5000;

/**
 * Listens on `bind`; on failure logs and retries every 5 s until it works or
 * `close()` is called. Logs "<what> listening" with the bound address
 * (the real port when asked for port 0).
 */
export interface Listener {
  /** Resolves once listening (after retries, if any); never rejects. */
  readonly listening: Promise<string>;
  close(): Promise<void>;
}

/** `build` makes a fresh server for each attempt (a fastify instance that failed to listen is not reused). */
export function listenWithRetry(build: () => FastifyInstance, bind: BindAddress, what: string, log: Logger, retryMs = RETRY_MS): Listener {
  let timer: NodeJS.Timeout | undefined;
  let closed = false;
  let app: FastifyInstance | undefined;
  let resolveListening: (address: string) => void = () => {};
  const listening = new Promise<string>((r) => (resolveListening = r));
  const attempt = () => {
    timer = undefined;
    const current = build();
    app = current;
    current.listen({ host: bind.host, port: bind.port }).then(
      () => {
        const a = current.server.address();
        const address = a && typeof a === 'object' ? formatAddress(a.address, a.port) : String(a);
        log.info(`${what} listening`, { address });
        resolveListening(address);
      },
      (err: Error) => {
        void current.close().catch(() => undefined);
        if (closed) return;
        log.error(`${what} failed to listen; retrying`, { address: formatAddress(bind.host, bind.port), error: err.message, retryInMs: retryMs });
        timer = setTimeout(attempt, retryMs);
      },
    );
  };
  attempt();
  return {
    listening,
    async close() {
      closed = true;
      clearTimeout(timer);
      await app?.close();
    },
  };
}
