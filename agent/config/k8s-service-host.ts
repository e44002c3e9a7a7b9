/**
 * --k8s-service-host (chart value k8sServiceHost): a bare host, an IP
 * address or a DNS name, as Cilium's k8sServiceHost and the
 * KUBERNETES_SERVICE_HOST variable it stands in for. The port is
 * --k8s-service-port and the scheme is always https.
 *
 * A value with a port or a scheme ("198.18.0.2:6443", "https://api") is
 * refused: the URL setter the agent puts the host in (kubeconfig.ts) would
 * silently drop the port or ignore the whole value, and the agent would
 * dial the `kubernetes` ClusterIP instead, without the warning an unset
 * value gets.
 */
import { isIP } from 'node:net';

/** A DNS name: dot-separated labels of letters, digits and inner hyphens, an optional final dot. */
const DNS_NAME = /^(?=.{1,253}\.?$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

const HINT = 'a bare IP address or DNS name, e.g. 198.18.0.2, 2001:db8::2 or api.example.com; the port goes in --k8s-service-port (chart value k8sServicePort)';

/** Why `host` is not a valid --k8s-service-host, or undefined when it is. */
export function k8sServiceHostProblem(host: string): string | undefined {
  if (/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(host)) return 'has a scheme';
  if (/^\[[^\]]*\](:\d*)?$/.test(host)) return /\]:/.test(host) ? 'has a port' : 'is a bracketed IPv6 address';
  if (isIP(host) === 4 || (isIP(host) === 6 && !host.includes('%'))) return undefined;
  if (/^[^:]+:\d*$/.test(host)) return 'has a port';
  if (DNS_NAME.test(host) && !/^[\d.]+$/.test(host)) return undefined;
  return 'is not an IP address or DNS name';
}

/** `host` if it is a valid --k8s-service-host; throws a message saying what is wrong and what to give. */
export function checkK8sServiceHost(host: string, flag = '--k8s-service-host'): string {
  const problem = k8sServiceHostProblem(host);
  if (problem) throw new Error(`invalid ${flag} "${host}": it ${problem} (${HINT})`);
  return host;
}
