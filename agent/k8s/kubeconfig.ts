/**
 * Where the agent finds its API server: an explicit kubeconfig file, else the
 * in-cluster service account (KUBERNETES_SERVICE_HOST), else the default
 * locations ($KUBECONFIG, ~/.kube/config). The server address can be
 * overridden like kube-proxy's --master / the --k8s-service-host/port flags.
 */
import { KubeConfig, type Cluster } from '@kubernetes/client-node';
import { looksLikeIPv6 } from '../net/ip.js';
import { checkK8sServiceHost } from '../config/k8s-service-host.js';

export interface LoadKubeConfigOptions {
  /** Path of a kubeconfig file; wins over in-cluster and default discovery. */
  kubeconfig?: string;
  /** Context to use instead of the file's current-context. */
  context?: string;
  /** Full server URL override (e.g. "https://10.0.0.1:6443"); wins over serviceHost/servicePort. */
  server?: string;
  /** Overrides only the host of the server URL (keeps scheme and port unless servicePort is given). */
  serviceHost?: string;
  /** Overrides only the port of the server URL. */
  servicePort?: string | number;
}

export function loadKubeConfig(opts: LoadKubeConfigOptions = {}): KubeConfig {
  const kc = new KubeConfig();
  if (opts.kubeconfig) {
    kc.loadFromFile(opts.kubeconfig);
  } else if (process.env.KUBERNETES_SERVICE_HOST) {
    kc.loadFromCluster();
  } else {
    kc.loadFromDefault();
  }
  if (opts.context) kc.setCurrentContext(opts.context);

  let server = opts.server;
  if (!server && (opts.serviceHost || opts.servicePort !== undefined)) {
    const current = kc.getCurrentCluster();
    const base = new URL(current?.server ?? 'https://kubernetes.default.svc:443');
    // The URL setter would silently drop a port or ignore a value with a scheme: refuse those here too.
    if (opts.serviceHost) base.hostname = looksLikeIPv6(checkK8sServiceHost(opts.serviceHost, 'serviceHost')) ? `[${opts.serviceHost}]` : opts.serviceHost;
    if (opts.servicePort !== undefined) base.port = String(opts.servicePort);
    server = base.toString().replace(/\/$/, '');
  }
  if (server) setServer(kc, server);
  return kc;
}

/** Points the current context's cluster at `server` (other clusters are left as they are). */
export function setServer(kc: KubeConfig, server: string): void {
  const current = kc.getCurrentCluster();
  if (!current) throw new Error('kubeconfig has no current cluster to override the server of');
  const clusters: Cluster[] = kc.clusters.map((c) => (c.name === current.name ? { ...c, server } : c));
  kc.loadFromOptions({ clusters, users: kc.users, contexts: kc.contexts, currentContext: kc.getCurrentContext() });
}
