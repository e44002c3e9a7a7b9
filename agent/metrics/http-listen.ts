/**
 * A listen that, like kube-proxy's health and metrics servers, keeps
 * retrying every 5 s instead of taking the proxy down when the port is busy.
 * The addresses are net/listen-address.ts's.
 */
import type { FastifyInstance } from 'fastify';
import type { Logger } from '../log/log.js';
import { formatAddress, type BindAddress } from '../net/listen-address.js';

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
