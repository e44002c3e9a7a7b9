/**
 * The cluster's ServiceCIDR objects (networking.k8s.io/v1, GA in Kubernetes
 * 1.33), watched with the same reflector as Services (list, then watch, with
 * client-go's relist rules), apart from ClusterWatch: the kind is optional.
 * An API server that does not serve it (404: before 1.33, or the API turned
 * off) or does not let kpr read it (403: RBAC without servicecidrs) is no
 * failure: the agent starts all the same, the ranges come from
 * --service-cluster-ip-range (agent/plan/service-ranges.ts), and the
 * reflector keeps asking, slowly, so a cluster upgraded later is picked up.
 * That is said in one log line, not one per retry.
 */
import { V1ObjectMeta, V1ServiceCIDR, V1ServiceCIDRSpec, type KubeConfig } from '@kubernetes/client-node';
import type { ApiRequestObserver } from './api-requests.js';
import { Reflector, type RelistReason, type WatchEndReason } from './reflector.js';
import type { Logger } from './watchers.js';

export const SERVICE_CIDR_PATH = '/apis/networking.k8s.io/v1/servicecidrs';
export const SERVICE_CIDR_KIND = 'ServiceCIDR';

/** Whether the API serves ServiceCIDRs to kpr: unknown before the first answer. */
export type ServiceCidrAvailability = 'unknown' | 'served' | 'not_served' | 'forbidden';

export interface ServiceCidrWatchOptions {
  kubeConfig: KubeConfig;
  logger: Logger;
  /** Any change of the objects or of the availability. */
  onChange: () => void;
  onApiRequest?: ApiRequestObserver;
  onRelist?: (reason: RelistReason) => void;
  onWatchEnd?: (reason: WatchEndReason) => void;
  /** Longest wait between two attempts while the kind is not served. Default 60 s. */
  maxRetryMs?: number;
}

/** Only what the ranges need: the name and spec.cidrs. */
function pruneServiceCidr(o: V1ServiceCIDR): V1ServiceCIDR {
  const out = new V1ServiceCIDR();
  out.metadata = Object.assign(new V1ObjectMeta(), { name: o.metadata?.name, resourceVersion: o.metadata?.resourceVersion, uid: o.metadata?.uid });
  out.spec = Object.assign(new V1ServiceCIDRSpec(), { cidrs: o.spec?.cidrs });
  return out;
}

export class ServiceCidrWatch {
  private readonly objects = new Map<string, V1ServiceCIDR>();
  private readonly reflector: Reflector<V1ServiceCIDR>;
  private state: ServiceCidrAvailability = 'unknown';

  constructor(private readonly o: ServiceCidrWatchOptions) {
    const log = o.logger;
    const changed = (type: 'add' | 'update' | 'delete') => (obj: V1ServiceCIDR) => {
      const name = obj.metadata?.name ?? '';
      if (type === 'delete') this.objects.delete(name);
      else this.objects.set(name, obj);
      this.o.onChange();
    };
    this.reflector = new Reflector<V1ServiceCIDR>({
      kind: SERVICE_CIDR_KIND,
      kubeConfig: o.kubeConfig,
      path: SERVICE_CIDR_PATH,
      typeName: 'V1ServiceCIDR',
      prune: pruneServiceCidr,
      pageSize: 100,
      restartBackoffMs: 200,
      maxRestartBackoffMs: o.maxRetryMs ?? 60_000,
      noProgressMs: 300_000,
      log: {
        info: (m, f) => log.info(m, f),
        debug: (m, f) => log.debug(m, f),
        error: (m, f) => log.error(m, f),
        // A list refused with 404/403 is the availability, said once by setState; every other warning passes.
        warn: (m, f) => {
          const status = Number((f as { status?: unknown } | undefined)?.status);
          if (status === 404) this.setState('not_served');
          else if (status === 403) this.setState('forbidden');
          else log.warn(m, f);
        },
      },
      handlers: { add: changed('add'), update: changed('update'), delete: changed('delete') },
      onSynced: () => this.setState('served'),
      onRelist: (info) => {
        this.setState('served');
        o.onRelist?.(info.reason);
      },
      ...(o.onApiRequest ? { onApiRequest: o.onApiRequest } : {}),
      ...(o.onWatchEnd ? { onWatchEnd: o.onWatchEnd } : {}),
    });
  }

  start(): void {
    this.reflector.start();
  }

  async stop(): Promise<void> {
    await this.reflector.stop();
  }

  availability(): ServiceCidrAvailability {
    return this.state;
  }

  /** The objects when the kind is served and listed; undefined otherwise (the flag's ranges apply). */
  list(): V1ServiceCIDR[] | undefined {
    if (this.state !== 'served') return undefined;
    return [...this.objects.values()];
  }

  private setState(s: ServiceCidrAvailability): void {
    if (s === this.state) return;
    const before = this.state;
    this.state = s;
    if (s === 'not_served')
      this.o.logger.info(
        'the API server does not serve ServiceCIDR (networking.k8s.io/v1, Kubernetes 1.33+): service ranges come from --service-cluster-ip-range; asked again every minute',
      );
    else if (s === 'forbidden')
      this.o.logger.warn(
        'ServiceCIDR list forbidden (RBAC: list/watch servicecidrs.networking.k8s.io): service ranges come from --service-cluster-ip-range; asked again every minute',
      );
    else if (s === 'served' && before !== 'unknown') this.o.logger.info('ServiceCIDR is served now: service ranges come from the ServiceCIDR objects');
    this.o.onChange();
  }
}
