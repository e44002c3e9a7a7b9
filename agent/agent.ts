/**
 * One agent run: datapath up (adopting pinned state), caches synced, first
 * full sync, then incremental syncs as changes arrive. Stopping releases this
 * process's handles only; the pinned datapath keeps serving.
 */
import { BatchWriter, releaseFreeNativeMemory, setLibbpfLogger } from '../native/index.js';
import type { AgentConfig } from './config.js';
import { batchWriterPath, loadDatapath, type Datapath } from './datapath/loader.js';
import { NodeDatapath } from './datapath/node-datapath.js';
import { ClusterWatch } from './k8s/watchers.js';
import { loadKubeConfig } from './k8s/kubeconfig.js';
import { apiServerViaServiceIp, K8S_SERVICE_HOST_MESSAGE } from './preflight/api-server-route.js';
import { memoryFields, type Logger } from './log.js';
import { collectYoungIfFilling, releaseMemory } from './memory.js';
import { BpfDatapathMaps } from './maps/bpf-datapath-maps.js';
import { UdpTerminator, type UdpTerminationMode } from './datapath/udp-terminator.js';
import { ServiceHealthServers } from './service-health/servers.js';
import { Observability } from './metrics/observability.js';
import { Reconciler } from './reconcile/reconciler.js';
import { SyncLoop, type SyncReport } from './sync-loop.js';

export interface AgentHooks {
  onSync?: (report: SyncReport) => void;
}

export class Agent {
  private datapath: Datapath | undefined;
  private watch: ClusterWatch | undefined;
  private loop: SyncLoop | undefined;
  private obs: Observability | undefined;
  private nodeDatapath: NodeDatapath | undefined;
  private serviceHealth: ServiceHealthServers | undefined;
  private writer: BatchWriter | undefined;
  private udpTerminator: UdpTerminator | undefined;

  constructor(
    private readonly cfg: AgentConfig,
    private readonly log: Logger,
    private readonly hooks: AgentHooks = {},
  ) {}

  async start(): Promise<void> {
    const { cfg, log } = this;
    const libbpfLog = log.child({ source: 'libbpf' });
    setLibbpfLogger((level, msg) => libbpfLog[level === 'warn' ? 'warn' : 'debug'](msg.trimEnd()));

    const { healthzBindAddress, metricsBindAddress } = cfg;
    const obs = new Observability({ bpffsDir: cfg.bpffsDir, syncPeriodMs: cfg.syncPeriodMs, healthzBindAddress, metricsBindAddress, log, node: () => this.watch?.node() });
    this.obs = obs;
    obs.start();

    this.datapath = loadDatapath({ ...cfg, loadUdpIterator: cfg.udpTermination !== 'netlink' }, log);
    const dp = this.datapath;
    // healthCheckNodePort servers (eTP=Local LoadBalancers), in the node's namespace, healthy as the proxy is.
    this.serviceHealth = new ServiceHealthServers({ netns: cfg.netns, proxyHealthy: () => obs.health.health().healthy, log: log.child({ source: 'service-health' }), onShed: (kind) => obs.metrics.connectionShed('service-health', kind) });
    const udpTerminator = new UdpTerminator({
      setting: cfg.udpTermination,
      ...(dp.udpIterator ? { iterator: dp.udpIterator } : {}),
      ...(dp.udpIteratorError !== undefined ? { iteratorError: dp.udpIteratorError } : {}),
      maps: { term: dp.maps.term, revnat: dp.maps.revnat, stats: dp.maps.stats },
      log: log.child({ source: 'udp-terminator' }),
      onDestroyed: (mode, n) => obs.metrics.udpSocketsDestroyed(mode, n),
    });
    this.udpTerminator = udpTerminator;
    obs.metrics.udpTerminationMode(udpTerminator.mode);
    this.writer = startBatchWriter(cfg.bpfObject, log);
    const maps = new BpfDatapathMaps({
      svc: dp.maps.svc,
      backend: dp.maps.backend,
      vip: dp.maps.vip,
      affinityMatch: dp.maps.affinityMatch,
      svcMeta: dp.maps.svcMeta,
      srcRange: dp.maps.srcRange,
      writer: this.writer,
    });
    const reconciler = new Reconciler(obs.instrument(maps), log.child({ source: 'reconciler' }));
    obs.adopted(reconciler.adopt());

    const kc = loadKubeConfig({ kubeconfig: cfg.kubeconfig, serviceHost: cfg.k8sServiceHost, servicePort: cfg.k8sServicePort });
    const viaServiceIp = apiServerViaServiceIp(cfg);
    if (viaServiceIp) log.error(K8S_SERVICE_HOST_MESSAGE, { server: kc.getCurrentCluster()?.server });
    this.watch = new ClusterWatch({ kubeConfig: kc, nodeName: cfg.nodeName, logger: log.child({ source: 'k8s' }) });
    const loop = new SyncLoop(this.watch, reconciler, {
      nodeName: cfg.nodeName,
      syncPeriodMs: cfg.syncPeriodMs,
      minSyncPeriodMs: cfg.minSyncPeriodMs,
      plan: { nodePortAddresses: cfg.nodePortAddresses, sourceRangesForAllExternal: cfg.sourceRangesAllExternal },
      log,
      // kpr_config is the node datapath's: the periodic read-back repairs it too.
      repairNodeDrift: () => this.nodeDatapath?.repairConfig() ?? [],
      // Connected UDP sockets still pointing at a backend that left are destroyed so their owners reconnect.
      onUdpBackendsRemoved: (left) => udpTerminator.terminate(left),
      onHealthChecks: (targets) => {
        this.serviceHealth?.sync(targets).catch((err) => log.warn('service health check servers', { error: (err as Error).message }));
      },
      onSync: (r) => {
        obs.synced(r);
        if (r.full && r.trigger !== 'initial' && r.result.ok) {
          log.debug('memory released after a full sync', { ...releaseMemory(), ...memoryFields() });
        } else if (!r.full) {
          // The maps are written: the scavenge the next change would otherwise run into, now.
          collectYoungIfFilling();
        }
        this.hooks.onSync?.(r);
      },
    });
    this.loop = loop;
    // Changes before the initial sync are covered by it; the loop ignores nothing after.
    let initialDone = false;
    this.watch.onChange((c) => {
      obs.changed(c, initialDone);
      if (c.kind === 'Node') this.nodeDatapath?.nodeChanged(this.watch?.node());
      if (initialDone) loop.serviceChanged(c.kind === 'Node' ? null : c.key);
    });

    releaseFreeNativeMemory(); // what loading the BPF objects freed
    log.info('waiting for the k8s caches', { server: kc.getCurrentCluster()?.server, ...memoryFields() });
    const stillWaiting = viaServiceIp ? setTimeout(() => log.error(`caches not synced after 30s; ${K8S_SERVICE_HOST_MESSAGE}`), 30_000).unref() : undefined;
    await this.watch.start().finally(() => clearTimeout(stillWaiting));
    const syncedAt = performance.now();
    const cachesMemory = memoryFields();
    obs.loopStarting();
    const report = loop.start();
    const cacheSyncedToMapsWrittenMs = performance.now() - syncedAt;
    initialDone = true;
    const released = releaseMemory();
    log.info('initial sync complete', {
      cacheSyncedToMapsWrittenMs: Number(cacheSyncedToMapsWrittenMs.toFixed(3)),
      ok: report.result.ok,
      services: report.services,
      frontends: report.result.frontends,
      backends: report.result.backends,
      written: report.result.servicesWritten + report.result.backendsWritten,
      deleted: report.result.servicesDeleted + report.result.backendsDeleted,
      ...memoryFields(),
      cachesSynced: cachesMemory,
      releaseMemoryMs: released.ms,
      fullGc: released.fullGc,
    });
    this.nodeDatapath = new NodeDatapath(this.datapath, cfg, log.child({ source: 'tc' }), { onTimerError: (op) => obs.metrics.nodeDatapathFailed(op) });
    const nodeDatapath = this.nodeDatapath;
    this.obs?.metrics.tcAttacher(() => nodeDatapath.tcStatus());
    this.nodeDatapath.start(this.watch.node());
  }

  /** How connected UDP sockets of a removed backend are destroyed on this node ('off' before start). */
  udpTerminationMode(): UdpTerminationMode {
    return this.udpTerminator?.mode ?? 'off';
  }

  async stop(): Promise<void> {
    this.loop?.stop();
    this.nodeDatapath?.stop();
    await this.serviceHealth?.close();
    await this.watch?.stop();
    await this.obs?.stop();
    this.writer?.close();
    this.writer = undefined;
    this.datapath?.close();
    this.datapath = undefined;
    this.log.info('agent stopped; the pinned datapath keeps serving');
  }
}

/**
 * The writer thread for large map updates (native/batch_writer.c), built next
 * to the BPF objects. Without it every batch is written synchronously: the
 * same result, a slower full sync.
 */
function startBatchWriter(bpfObject: string, log: Logger): BatchWriter | undefined {
  const lib = batchWriterPath(bpfObject);
  try {
    return BatchWriter.open(lib);
  } catch (err) {
    log.warn('batch writer thread unavailable; map batches are written synchronously', { library: lib, error: (err as Error).message });
    return undefined;
  }
}
