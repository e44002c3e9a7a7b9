/**
 * One request of the agent to the API server, as client-go's rest_client_*
 * metrics see it: the HTTP method, the server's host[:port] as the
 * kubeconfig spells it (Go's url.Host), and the status code, or "<error>"
 * when no answer came back (client-go's label for a transport error).
 */
export interface ApiRequest {
  method: string;
  host: string;
  code: string;
  /** Request to whole answer read, for list requests; undefined for watches (client-go times neither). */
  seconds?: number;
}

export type ApiRequestObserver = (r: ApiRequest) => void;

/** "host[:port]" of a server URL as written ("https://10.96.0.1:443" → "10.96.0.1:443"; WHATWG URL would drop :443). */
export function serverHost(server: string): string {
  const m = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(server);
  const authority = m ? m[1] : server;
  return authority.slice(authority.lastIndexOf('@') + 1);
}

/** The code label of a failed request: its HTTP status if it had one, else "<error>". */
export function errorCode(err: unknown): string {
  const status = (err as { statusCode?: unknown; code?: unknown } | undefined)?.statusCode ?? (err as { code?: unknown } | undefined)?.code;
  return typeof status === 'number' && Number.isInteger(status) && status >= 100 && status < 600 ? String(status) : '<error>';
}
