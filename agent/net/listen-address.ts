/**
 * Listen ("bind") addresses in kube-proxy's format: "host:port" for IPv4,
 * "[v6]:port" for IPv6, as --healthz-bind-address and --metrics-bind-address
 * take them. Read by the flag parser and by the health and metrics listeners.
 *
 * The host is what a socket can bind: node:net's isIP, so an IPv6 address
 * may carry a zone ("[fe80::1%eth0]:10256"), unlike an address in a
 * Kubernetes object (ip.ts).
 */
import { isIP } from 'node:net';

export interface BindAddress {
  host: string;
  port: number;
}

/** Parses "0.0.0.0:10256", "[::]:10256", "127.0.0.1:0"; "" (disabled) gives undefined; anything else throws, naming `flag`. */
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

/** "host:port", the host bracketed when it is IPv6 (what parseBindAddress reads back). */
export function formatAddress(host: string, port: number): string {
  return isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;
}
