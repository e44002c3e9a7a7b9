/**
 * Where the agent finds its API server: an explicit kubeconfig file, else the
 * in-cluster service account (KUBERNETES_SERVICE_HOST), else the default
 * locations ($KUBECONFIG, ~/.kube/config). The server address can be
 * overridden like kube-proxy's --master / the --k8s-service-host/port flags.
 *
 * A user's `tokenFile` (client-go's spelling, what kubeadm's kube-proxy
 * kubeconfig.conf uses for the pod's service account token) is honoured:
 * client-node reads only `token-file`, once, so without this such a
 * kubeconfig would send no credentials at all.
 */
import path from 'node:path';
import { KubeConfig, type Cluster, type User } from '@kubernetes/client-node';
import { looksLikeIPv6 } from '../net/ip.js';
import { checkK8sServiceHost } from '../config/k8s-service-host.js';
import { parseYamlDocuments } from '../input/bounded-yaml.js';
import { CONFIG_YAML_LIMITS } from '../config/config-file.js';
import { readRegularFile } from '../input/bounded-read.js';

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
    useTokenFiles(kc, opts.kubeconfig);
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

const KUBECONFIG_MAX_BYTES = 4 * 1024 * 1024;

/**
 * Users of the kubeconfig `file` with a `tokenFile` and no other credential
 * get client-node's file token provider, as its in-cluster config has: the
 * token is read at the first request and again every minute, so a rotated
 * service account token is picked up (client-go re-reads it likewise). A
 * relative path is relative to the kubeconfig's directory, as in client-go.
 */
export function useTokenFiles(kc: KubeConfig, file: string): void {
  const doc = parseYamlDocuments(readRegularFile(file, KUBECONFIG_MAX_BYTES), CONFIG_YAML_LIMITS)[0] as { users?: unknown } | undefined;
  const tokenFiles = new Map<string, string>();
  for (const entry of Array.isArray(doc?.users) ? doc.users : []) {
    const name = (entry as { name?: unknown })?.name;
    const tokenFile = (entry as { user?: { tokenFile?: unknown } })?.user?.tokenFile;
    if (typeof name === 'string' && typeof tokenFile === 'string' && tokenFile !== '') tokenFiles.set(name, path.resolve(path.dirname(file), tokenFile));
  }
  if (tokenFiles.size === 0) return;
  const users: User[] = kc.users.map((u) => {
    const tokenFile = tokenFiles.get(u.name);
    const hasCredential = u.token || u.authProvider || u.exec || u.certFile || u.certData || u.username;
    return tokenFile && !hasCredential ? { ...u, authProvider: { name: 'tokenFile', config: { tokenFile } } } : u;
  });
  kc.loadFromOptions({ clusters: kc.clusters, users, contexts: kc.contexts, currentContext: kc.getCurrentContext() });
}
