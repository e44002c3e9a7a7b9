/**
 * One agent run: datapath up (adopting pinned state), caches synced, first
 * full sync, then incremental syncs as changes arrive. Stopping releases this
 * process's handles only; the pinned datapath keeps serving.
 */
import { setLibbpfLogger } from '../native/index.js';
import type { AgentConfig } from './config.js';
import { loadDatapath, type Datapath } from './datapath/loader.js';
import { ClusterWatch } from './k8s/watchers.js';
import { loadKubeConfig } from './k8s/kubeconfig.js';
import type { Logger } from './log.js';
import { BpfDatapathMaps } from './maps/bpf-datapath-maps.js';
import { Reconciler } from './reconcile/reconciler.js';
import { SyncLoop, type SyncReport } from './sync-loop.js';

export interface AgentHooks {
  onSync?: (report: SyncReport) => void;
}

export class Agent {
  private datapath: Datapath | undefined;
  private watch: ClusterWatch | undefined;
  private loop: SyncLoop | undefined;

  constructor(
    private readonly cfg: AgentConfig,
    private readonly log: Logger,
    private readonly hooks: AgentHooks = {},
  ) {}

  async start(): Promise<void> {
    const { cfg, log } = this;
    const libbpfLog = log.child({ source: 'libbpf' });
    setLibbpfLogger((level, msg) => libbpfLog[level === 'warn' ? 'warn' : 'debug'](msg.trimEnd()));

    this.datapath = loadDatapath(cfg, log);
    const reconciler = new Reconciler(new BpfDatapathMaps(this.datapath.svcMap, this.datapath.backendMap), log.child({ source: 'reconciler' }));
    reconciler.adopt();

    const kc = loadKubeConfig({ kubeconfig: cfg.kubeconfig });
    this.watch = new ClusterWatch({ kubeConfig: kc, nodeName: cfg.nodeName, logger: log.child({ source: 'k8s' }) });
    const loop = new SyncLoop(this.watch, reconciler, {
      nodeName: cfg.nodeName,
      syncPeriodMs: cfg.syncPeriodMs,
      minSyncPeriodMs: cfg.minSyncPeriodMs,
      log,
      onSync: this.hooks.onSync,
    });
    this.loop = loop;
    // Changes before the initial sync are covered by it; the loop ignores nothing after.
    let initialDone = false;
    this.watch.onChange((c) => {
      if (initialDone) loop.serviceChanged(c.kind === 'Node' ? null : c.key);
    });

    log.info('waiting for the k8s caches', { server: kc.getCurrentCluster()?.server });
    await this.watch.start();
    const syncedAt = performance.now();
    const report = loop.start();
    initialDone = true;
    log.info('initial sync complete', {
      cacheSyncedToMapsWrittenMs: Number((performance.now() - syncedAt).toFixed(3)),
      ok: report.result.ok,
      services: report.services,
      frontends: report.result.frontends,
      backends: report.result.backends,
      written: report.result.servicesWritten + report.result.backendsWritten,
      deleted: report.result.servicesDeleted + report.result.backendsDeleted,
    });
  }

  async stop(): Promise<void> {
    this.loop?.stop();
    await this.watch?.stop();
    this.datapath?.close();
    this.datapath = undefined;
    this.log.info('agent stopped; the pinned datapath keeps serving');
  }
}
