/**
 * One agent run: datapath up (adopting pinned state), caches synced, first
 * full sync, then incremental syncs as changes arrive. Stopping releases this
 * process's handles only; the pinned datapath keeps serving.
 */
import os from 'node:os';
import { BatchWriter, possibleCpus, releaseFreeNativeMemory, setLibbpfLogger } from '../native/index.js';
import { computeMapSizes, describeMapSizes } from './datapath/map-sizes.js';
import type { AgentConfig } from './config/agent-config.js';
import { batchWriterPath, loadDatapath, type Datapath } from './datapath/loader.js';
import { nativeStillExpiredDeleter } from './datapath/ct-sweeper.js';
import { NodeDatapath } from './datapath/node-datapath.js';
import { PinKeeper } from './datapath/pin-keeper.js';
import { mapPinPath } from './datapath/pins.js';
import { MAP_NAMES } from './maps/layout.js';
import { formatFeature, recordDatapathFallbacks, summarizeFeatures, type KernelFeatures } from './datapath/kernel-features.js';
import { probeKernelFeatures } from './datapath/kernel-probes.js';
import { nodeNetnsCookie } from './datapath/netns-cookie.js';
import { RetryingTask } from './runtime/retrying-task.js';
import { ClusterWatch } from './k8s/watchers.js';
import { validateObject } from './k8s/validate.js';
import { loadKubeConfig } from './k8s/kubeconfig.js';
import { apiServerViaServiceIp, K8S_SERVICE_HOST_MESSAGE } from './preflight/api-server-route.js';
import { memoryFields, type Logger } from './log/log.js';
import { afterInitialSync, collectYoungIfFilling } from './runtime/memory.js';
import { FillWarning } from './reconcile/fill-warning.js';
import { BpfDatapathMaps } from './maps/bpf-datapath-maps.js';
import { UdpTerminator, type UdpTerminationMode } from './datapath/udp-terminator.js';
import { ServiceHealthServers } from './service-health/servers.js';
import { reserveSnatPortsAtStart } from './snat-ports/at-start.js';
import { Observability } from './metrics/observability.js';
import { Reconciler } from './reconcile/reconciler.js';
import type { MapCapacities } from './maps/capacities.js';
import { SyncLoop, type SyncReport } from './sync/sync-loop.js';
import { ServiceRanges } from './sync/service-ranges.js';

export interface AgentHooks {
  onSync?: (report: SyncReport) => void;
}

export class Agent {
  private datapath: Datapath | undefined;
  private watch: ClusterWatch | undefined;
  private loop: SyncLoop | undefined;
  private obs: Observability | undefined;
  private nodeDatapath: NodeDatapath | undefined;
  /** Holds kpr's pinned maps and links open and pins them again when their pins go (see pin-keeper.ts). */
  private pins: PinKeeper | undefined;
  private serviceHealth: ServiceHealthServers | undefined;
  private writer: BatchWriter | undefined;
  private udpTerminator: UdpTerminator | undefined;
  private features: KernelFeatures | undefined;
  /** Brings the node's tc datapath up (after the initial sync); retried until it succeeds. */
  private nodeDatapathTask: RetryingTask | undefined;
  /** Ends a live map migration once the node datapath runs on the new set; retried on failure. */
  private migrationTask: RetryingTask | undefined;
  /** Writes the node-wide settings for the Node object as last seen; retried on failure. */
  private nodeSettingsTask: RetryingTask | undefined;
  /** The node namespace's cookie once known (undefined: this kernel cannot tell; null: not resolved yet). */
  private hostNetnsCookie: bigint | undefined | null = null;
  /** The service ranges (ServiceCIDR objects or --service-cluster-ip-range) in kpr_svc_cidr. */
  private serviceRanges: ServiceRanges | undefined;

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
    const obs = new Observability({
      bpffsDir: cfg.bpffsDir,
      syncPeriodMs: cfg.syncPeriodMs,
      healthzBindAddress,
      metricsBindAddress,
      log,
      node: () => this.watch?.node(),
      caches: () => this.watch?.cacheStatus(),
      config: cfg,
      serviceRanges: () => this.serviceRanges?.report(),
    });
    this.obs = obs;
    obs.start();

    const probed = probeKernelFeatures({ cgroupPath: cfg.cgroupPath, bpfObject: cfg.bpfObject });
    const features = probed.features;
    this.features = features;
    if (probed.unknownNames.length) log.warn('unknown kernel feature names in the environment', { names: probed.unknownNames });
    obs.metrics.kernelFeatures(() => features.list());
    features.onChange((f) => log.warn('kernel feature changed', { feature: f.feature, state: f.state, fallback: f.fallback, text: formatFeature(f) }));
    const sizes = computeMapSizes(
      { ...cfg.mapSizeOptions, serviceCounters: cfg.serviceCounters },
      { totalMemoryBytes: os.totalmem(), cpus: os.availableParallelism(), possibleCpus: possibleCpus() },
    );
    log.info('BPF map sizes', { maps: describeMapSizes(sizes) });
    this.datapath = loadDatapath(
      {
        ...cfg,
        mapSizes: sizes.byMapName,
        loadUdpIterator: cfg.udpTermination !== 'netlink',
        onIncompatiblePin: () => obs.metrics.pinRestored('map', 'incompatible'),
      },
      log,
      features,
    );
    const dp = this.datapath;
    obs.mapSizes({
      configured: sizes.byMapName,
      inUse: dp.mapSizes,
      migration: dp.migration ? { state: 'in progress', maps: dp.migration.reasons } : undefined,
    });
    const pins = new PinKeeper(cfg.bpffsDir, log.child({ source: 'pins' }), (object, reason) => obs.metrics.pinRestored(object, reason));
    this.pins = pins;
    // A migrating set is pinned in staging/ until it is promoted: the keeper holds the maps' pins from then.
    if (!dp.migration) this.keepMapPins();
    for (const a of dp.attachments) pins.keepLink(a.linkPinPath);
    this.resolveNetnsCookie(); // before the features line, so it says which netns cookie source is in use
    // healthCheckNodePort servers (eTP=Local LoadBalancers), in the node's namespace, healthy as the proxy is.
    this.serviceHealth = new ServiceHealthServers({
      netns: cfg.netns,
      proxyHealthy: () => obs.health.health().healthy,
      log: log.child({ source: 'service-health' }),
      onShed: (kind) => obs.metrics.connectionShed('service-health', kind),
    });
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
    // The tc programs attach as clsact filters where tcx is missing (TcAttacher, --tc-attach auto or tc); UDP sockets go through netlink when the terminator chose it.
    recordDatapathFallbacks(features, { tcAttach: cfg.tcAttach, sockDestroyNetlink: () => (udpTerminator.mode === 'netlink' ? null : undefined) });
    log.info('kernel features', { summary: summarizeFeatures(features.list()), features: features.list().map(formatFeature) });
    this.writer = startBatchWriter(cfg.bpfObject, log);
    const maps = new BpfDatapathMaps({
      svc: dp.maps.svc,
      backend: dp.maps.backend,
      vip: dp.maps.vip,
      affinityMatch: dp.maps.affinityMatch,
      svcMeta: dp.maps.svcMeta,
      svcStats: dp.maps.svcStats,
      srcRange: dp.maps.srcRange,
      maglev: dp.maps.maglev,
      maglevRef: dp.maps.maglevRef,
      writer: this.writer,
    });
    // Frontend ids 1 .. n-1 index kpr_svc_stats and name kpr_svc_meta (n: map-sizes.ts frontendCapacity).
    const maxFrontendId = dp.maps.svcMeta.maxEntries - 1;
    const reconciler = new Reconciler(obs.instrument(maps), log.child({ source: 'reconciler' }), {
      capacities: testCapacities(maps.capacities(), cfg.testMapCapacities, log),
      maxFrontendId,
    });
    obs.adopted(reconciler.adopt());

    const kc = loadKubeConfig({ kubeconfig: cfg.kubeconfig, serviceHost: cfg.k8sServiceHost, servicePort: cfg.k8sServicePort });
    const viaServiceIp = apiServerViaServiceIp(cfg);
    if (viaServiceIp) log.error(K8S_SERVICE_HOST_MESSAGE, { server: kc.getCurrentCluster()?.server });
    this.watch = new ClusterWatch({
      kubeConfig: kc,
      nodeName: cfg.nodeName,
      logger: log.child({ source: 'k8s' }),
      // Each object is checked on its own before it is decoded: a malformed one is treated as absent.
      validate: validateObject,
      onRelist: (kind, reason) => obs.metrics.relisted(kind, reason),
      onApiRequest: (r) => obs.metrics.apiRequest(r),
      onWatchStart: (kind) => obs.metrics.watchStarted(kind),
      onWatchEnd: (kind, reason) => obs.metrics.watchEnded(kind, reason),
      onRejected: (kind) => obs.metrics.objectRejected(kind),
    });
    const fill = new FillWarning(log.child({ source: 'reconciler' }));
    const loop = new SyncLoop(this.watch, reconciler, {
      nodeName: cfg.nodeName,
      syncPeriodMs: cfg.syncPeriodMs,
      minSyncPeriodMs: cfg.minSyncPeriodMs,
      plan: {
        nodePortAddresses: cfg.nodePortAddresses,
        sourceRangesForAllExternal: cfg.sourceRangesAllExternal,
        externalIPCidrs: cfg.externalIPCidrs,
        lbAlgorithm: cfg.lbAlgorithm,
      },
      log,
      // kpr_config is the node datapath's: the periodic read-back repairs it too.
      // Attachments too: each periodic resync checks them against the kernel and attaches again what is missing.
      // kpr_svc_cidr, the service ranges' map, is repaired with kpr_config.
      repairNodeDrift: () => {
        this.nodeDatapath?.checkAttachmentsAtResync();
        return [...(this.nodeDatapath?.repairConfig() ?? []), ...(this.serviceRanges?.repair() ?? [])];
      },
      // Connected UDP sockets still pointing at a backend that left are destroyed so their owners reconnect.
      onUdpBackendsRemoved: (left) => udpTerminator.terminate(left),
      onHealthChecks: (targets) => {
        this.serviceHealth?.sync(targets).catch((err) => log.warn('service health check servers', { error: (err as Error).message }));
      },
      onSync: (r) => {
        obs.synced(r);
        fill.observe(r.result.fill);
        // The maps are written: the scavenge the next change would otherwise run into, now. Never a full GC here (runtime/memory.ts).
        if (r.trigger !== 'initial') collectYoungIfFilling();
        this.hooks.onSync?.(r);
      },
    });
    this.loop = loop;
    // Changes before the initial sync are covered by it; the loop ignores nothing after.
    let initialDone = false;
    this.watch.onChange((c) => {
      obs.changed(c, initialDone);
      if (c.kind === 'Node') this.nodeSettingsTask?.run();
      if (initialDone) loop.serviceChanged(c.kind === 'Node' ? null : c.key);
    });

    // Service ranges: the flag's at once, the ServiceCIDR objects' as they are listed; never waited for (the kind is optional).
    this.serviceRanges = new ServiceRanges({
      flag: cfg.serviceClusterIPRange,
      map: dp.maps.svcCidr,
      kubeConfig: kc,
      log: log.child({ source: 'service-ranges' }),
      onProblem: (source) => obs.metrics.serviceRangeError(source),
      onWriteFailed: () => obs.metrics.mapOperationFailed(MAP_NAMES.svcCidr, 'update'),
      onRanges: (ranges) => obs.metrics.serviceRanges(ranges),
      onApiRequest: (r) => obs.metrics.apiRequest(r),
      ...(process.env.KPR_TEST_SERVICE_CIDR_RETRY_MS ? { maxRetryMs: Number(process.env.KPR_TEST_SERVICE_CIDR_RETRY_MS) } : {}),
    });
    this.serviceRanges.start();

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
    if (dp.migration) {
      // The new set is filled: now the programs that use it replace the previous agent's.
      for (const a of dp.attachSockPrograms()) pins.keepLink(a.linkPinPath);
    }
    const released = afterInitialSync();
    log.info('initial sync complete', {
      cacheSyncedToMapsWrittenMs: Number(cacheSyncedToMapsWrittenMs.toFixed(3)),
      ok: report.result.ok,
      services: report.services,
      // Services refused or cut by a datapath limit (each logged; kpr_services_over_limit, /healthz servicesOverLimit).
      overLimit: report.result.limits?.length ? report.result.limits.length : undefined,
      frontends: report.result.frontends,
      backends: report.result.backends,
      written: report.result.servicesWritten + report.result.backendsWritten,
      deleted: report.result.servicesDeleted + report.result.backendsDeleted,
      ...memoryFields(),
      cachesSynced: cachesMemory,
      releaseMemoryMs: released.ms,
      fullGc: released.fullGc,
    });
    // From here on nothing may end the agent: each failure is logged, counted and retried.
    const onFailure = (task: string) => obs.metrics.taskFailed(task);
    const tcLog = log.child({ source: 'tc' });
    this.nodeSettingsTask = new RetryingTask('node-settings', () => this.nodeDatapath?.nodeChanged(this.watch?.node()), { log, onFailure });
    this.nodeDatapathTask = new RetryingTask(
      'node-datapath',
      () => {
        if (this.hostNetnsCookie === null) this.resolveNetnsCookie(true);
        const nd = new NodeDatapath(dp, cfg, tcLog, {
          hostNetnsCookie: this.hostNetnsCookie ?? undefined,
          onTimerError: (op) => obs.metrics.nodeDatapathFailed(op),
          pins,
          onCgroupReattached: () => obs.metrics.cgroupReattachedOnce(),
          onAttachmentRepaired: (hook) => obs.metrics.attachmentRepaired(hook),
          tcxAvailable: () => features.present('tcx'),
          ...(this.writer ? { ctSweepDeleter: nativeStillExpiredDeleter(this.writer) } : {}),
          reserveSnatPorts: (ownedBefore) => reserveSnatPortsAtStart({ netns: cfg.netns, ownedBefore, log: tcLog }),
        });
        nd.start(this.watch?.node());
        this.nodeDatapath = nd;
        obs.metrics.tcAttacher(() => nd.tcStatus());
        // The first check at once: /healthz says "attachments" from here on.
        nd.checkAttachmentsAtResync('probe');
        obs.attachments(() => nd.attachmentStatus());
        // The tc programs run on the new set now too: the migration can end.
        if (dp.migration) this.migrationTask?.run();
      },
      { log, onFailure },
    );
    this.migrationTask = new RetryingTask('map-migration', () => this.finishMigration(), { log, onFailure });
    this.nodeDatapathTask.run();
  }

  /** The end of a live map migration (agent/datapath/migration.ts), once every program runs on the new set. */
  private finishMigration(): void {
    const dp = this.datapath;
    const nd = this.nodeDatapath;
    if (!dp?.migration || !nd) return;
    const reasons = dp.migration.reasons;
    const summary = dp.migration.finish((tc) => nd.swapTcObject(tc));
    // KPR_CFG_F_MIGRATING off: written with the node settings (and what drift repair compares with).
    nd.nodeChanged(this.watch?.node());
    this.keepMapPins();
    for (const a of dp.attachments) this.pins?.keepLink(a.linkPinPath);
    this.obs?.mapSizes({ configured: dp.mapSizes, inUse: dp.mapSizes, migration: { state: 'done', maps: reasons } });
    this.log.info('map migration done: the old maps are released', { maps: reasons, copied: summary.copied, ms: Math.round(summary.ms) });
  }

  /** The pin keeper holds every map's pin (re-pinned if removed or replaced). */
  private keepMapPins(): void {
    const dp = this.datapath!;
    for (const [key, name] of Object.entries(MAP_NAMES)) this.pins?.keepMap(mapPinPath(this.cfg.bpffsDir, name), dp.maps[key as keyof typeof MAP_NAMES]);
  }

  /**
   * The node namespace's netns cookie (kpr_config.host_netns_cookie), through
   * SO_NETNS_COOKIE or its fallback. `rethrow`: a failure is the caller's to
   * retry; otherwise it is logged and resolved again when the node datapath starts.
   */
  private resolveNetnsCookie(rethrow = false): void {
    const { cfg, features } = this;
    try {
      this.hostNetnsCookie = nodeNetnsCookie({ netns: cfg.netns, features: features!, cgroupPath: cfg.cgroupPath, bpfObject: cfg.bpfObject });
    } catch (err) {
      if (rethrow) throw err;
      this.log.warn('node network namespace cookie not known yet, retried when the node datapath starts', { error: (err as Error).message });
    }
  }

  /** The kernel features as probed at start (and updated by the components using them). */
  kernelFeatures(): KernelFeatures | undefined {
    return this.features;
  }

  /** Counts a failure no component caught (main.ts's last line of defence once the agent runs). */
  uncaughtFailure(err: unknown): void {
    this.obs?.metrics.taskFailed('uncaught');
    this.log.error('unexpected failure; the agent keeps running', {
      error: err instanceof Error ? err.message : String(err),
      stack: err instanceof Error ? err.stack : undefined,
    });
  }

  /** How connected UDP sockets of a removed backend are destroyed on this node ('off' before start). */
  udpTerminationMode(): UdpTerminationMode {
    return this.udpTerminator?.mode ?? 'off';
  }

  async stop(): Promise<void> {
    this.loop?.stop();
    await this.serviceRanges?.stop();
    this.nodeDatapathTask?.stop();
    this.migrationTask?.stop();
    this.nodeSettingsTask?.stop();
    this.nodeDatapath?.stop();
    await this.serviceHealth?.close();
    await this.watch?.stop();
    await this.obs?.stop();
    this.writer?.close();
    this.writer = undefined;
    this.pins?.close();
    this.pins = undefined;
    this.datapath?.close();
    this.datapath = undefined;
    this.log.info('agent stopped; the pinned datapath keeps serving');
  }
}

/** The test knob's capacities (config/agent-config.ts testMapCapacities), where below the maps' own; logged, as no production node sets them. */
function testCapacities(maps: MapCapacities, test: Partial<MapCapacities> | undefined, log: Logger): Partial<MapCapacities> | undefined {
  if (!test) return undefined;
  const out: Partial<MapCapacities> = {};
  for (const [key, n] of Object.entries(test) as Array<[keyof MapCapacities, number]>) if (n < maps[key]) out[key] = n;
  log.warn('test knob: Services are admitted against smaller map capacities than the maps have', { capacities: out, maps });
  return out;
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
