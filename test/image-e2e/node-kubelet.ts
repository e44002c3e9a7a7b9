/**
 * The DaemonSet controller and the kubelet of the image test's one node,
 * against the embedded API server: every DaemonSet of the namespace whose
 * placement selects this node gets a Pod object and a pod run by podman
 * (pod-runner.ts): init containers in order, then the containers, each
 * restarted when it exits (restartPolicy Always; a new container, the init
 * containers do not run again); the pod's Ready condition and the
 * DaemonSet's status follow the probes. A DaemonSet deleted: its pod is
 * stopped (SIGTERM, SIGKILL after terminationGracePeriodSeconds) and its
 * Pod object removed. That is all `kpr cleanup-nodes` (the uninstall hook)
 * observes of a cluster.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import type { ApiServer, KubeObject } from '../../sandbox/apiserver.js';
import { podFitsNode } from '../support/node-placement.js';
import { planPod, type PodPlan } from '../image/pod-to-podman.js';
import { PodRun, type RunningContainer } from '../image/pod-runner.js';
import type { Podman } from '../image/podman.js';

export interface NodeInfo {
  name: string;
  labels: Record<string, string>;
  hostIP: string;
  serviceAccountDir: string;
  configMaps(namespace: string): Record<string, Record<string, string>>;
  /** The environment the kubelet gives every container (the kubernetes Service's). */
  serviceEnv?: Record<string, string>;
}

export interface ManagedPod {
  daemonSet: string;
  name: string;
  uid: string;
  plan: PodPlan;
  run: PodRun;
  /** Resolves when the init containers are done (rejects when one failed). */
  initialized: Promise<void>;
  deleting: boolean;
  /** Every container restart the kubelet made, by container. */
  restarts: Map<string, number>;
}

/** The plan of a pod template on this node (the kubelet's view of it). */
export function planOnNode(
  template: KubeObject,
  node: NodeInfo,
  pod: { name: string; namespace: string; uid: string },
  volumeRoot: string,
  podNetwork?: { netns: string; ip: string },
): PodPlan {
  return planPod(template as Record<string, unknown>, {
    podName: pod.name,
    namespace: pod.namespace,
    uid: pod.uid,
    nodeName: node.name,
    hostIP: node.hostIP,
    configMaps: node.configMaps(pod.namespace),
    volumeRoot,
    serviceAccountDir: node.serviceAccountDir,
    ...(podNetwork ? { podNetwork } : {}),
    ...(node.serviceEnv ? { serviceEnv: node.serviceEnv } : {}),
  });
}

export class NodeKubelet {
  readonly pods = new Map<string, ManagedPod>();
  readonly events: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private busy = false;

  constructor(
    private readonly api: ApiServer,
    private readonly podman: Podman,
    private readonly node: NodeInfo,
    private readonly namespace: string,
    private readonly dir: string,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), 500);
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await Promise.all([...this.pods.values()].map((p) => this.deletePod(p)));
  }

  /** The pod of a DaemonSet, once the controller made it. */
  async podOf(daemonSet: string, timeoutMs = 60_000): Promise<ManagedPod> {
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
      const p = this.pods.get(daemonSet);
      if (p && !p.deleting) return p;
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`no pod of DaemonSet ${daemonSet} on ${this.node.name} after ${timeoutMs} ms; events: ${this.events.join('; ')}`);
  }

  /** A container of a DaemonSet's pod as it runs now (after restarts, the new one). */
  async container(daemonSet: string, name: string, timeoutMs = 300_000): Promise<RunningContainer> {
    const end = Date.now() + timeoutMs;
    const pod = await this.podOf(daemonSet);
    await pod.initialized;
    while (Date.now() < end) {
      const c = pod.run.containers.get(name);
      if (c && c.exitCode === undefined) return c;
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`container ${name} of ${daemonSet} not running after ${timeoutMs} ms; events: ${this.events.join('; ')}`);
  }

  /**
   * A rollout of a DaemonSet's pod (updateStrategy RollingUpdate,
   * maxUnavailable 1): the old pod is stopped and removed, then
   * `between()` runs (what happened on the node meanwhile), then the
   * controller creates the new pod, init containers first.
   */
  async replacePod(daemonSet: string, between: () => void | Promise<void>): Promise<ManagedPod> {
    this.busy = true;
    try {
      const old = this.pods.get(daemonSet);
      if (old) await this.deletePod(old);
      await between();
    } finally {
      this.busy = false;
    }
    await this.tick();
    return this.podOf(daemonSet);
  }

  private async tick(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      const sets = this.api.list('DaemonSet', this.namespace);
      for (const ds of sets) {
        const name = ds.metadata!.name!;
        if (this.pods.has(name)) continue;
        const fits = podFitsNode(ds.spec.template.spec, { name: this.node.name, labels: this.node.labels });
        if (!fits) {
          this.setDaemonSetStatus(ds, 0, 0);
          continue;
        }
        this.createPod(ds);
      }
      for (const p of [...this.pods.values()]) {
        if (!p.deleting && !sets.some((d) => d.metadata!.name === p.daemonSet)) {
          this.events.push(`DaemonSet ${p.daemonSet} deleted: stopping pod ${p.name}`);
          await this.deletePod(p);
        }
      }
      for (const p of this.pods.values()) this.syncStatus(p);
    } finally {
      this.busy = false;
    }
  }

  private createPod(ds: KubeObject): void {
    const dsName = ds.metadata!.name!;
    const uid = randomUUID();
    const name = `${dsName}-${uid.slice(0, 5)}`;
    const template = ds.spec.template as KubeObject;
    const plan = planOnNode(template, this.node, { name, namespace: this.namespace, uid }, path.join(this.dir, 'volumes', name));
    this.api.create({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        name,
        namespace: this.namespace,
        uid,
        labels: template.metadata?.labels ?? {},
        ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: dsName, uid: ds.metadata!.uid, controller: true }],
      },
      spec: { ...template.spec, nodeName: this.node.name },
      status: { phase: 'Pending' },
    });
    const run = new PodRun(plan, name, this.podman, path.join(this.dir, 'run', name));
    const pod: ManagedPod = { daemonSet: dsName, name, uid, plan, run, initialized: Promise.resolve(), deleting: false, restarts: new Map() };
    this.events.push(`pod ${name} of DaemonSet ${dsName} created`);
    pod.initialized = this.initialize(pod);
    pod.initialized.catch(() => undefined);
    this.pods.set(dsName, pod);
  }

  private async initialize(pod: ManagedPod): Promise<void> {
    pod.run.prepareVolumes();
    // restartPolicy Always: a failed init container runs again (with the kubelet's back-off, here 10 s).
    for (let attempt = 0; ; attempt++) {
      try {
        await pod.run.runInitContainers();
        break;
      } catch (err) {
        const last = pod.run.initResults.at(-1);
        this.events.push(`pod ${pod.name}: ${(err as Error).message}`);
        this.updatePodStatus(pod, {
          phase: 'Pending',
          initContainerStatuses: [
            {
              name: last?.name,
              state: { waiting: { reason: 'CrashLoopBackOff' } },
              lastState: { terminated: { exitCode: last?.code ?? -1, message: (last?.stderr || last?.stdout || '').trim().slice(-500) } },
            },
          ],
        });
        if (pod.deleting || attempt >= 2) throw err;
        await new Promise((r) => setTimeout(r, 10_000));
        pod.run.initResults.length = 0;
      }
    }
    if (pod.deleting) return;
    for (const c of pod.run.startAll()) this.watch(pod, c);
  }

  private watch(pod: ManagedPod, c: RunningContainer): void {
    void c.exited.then((code) => {
      if (pod.deleting || pod.run.containers.get(c.plan.name) !== c) return;
      const n = (pod.restarts.get(c.plan.name) ?? 0) + 1;
      pod.restarts.set(c.plan.name, n);
      this.events.push(`container ${c.runtimeName} exited (${code}): restart ${n}`);
      // The kubelet's back-off: at once the first time, then 10 s, 20 s, ...
      const delay = n === 1 ? 0 : Math.min(300, 10 * 2 ** (n - 2)) * 1000;
      setTimeout(() => {
        if (pod.deleting) return;
        this.watch(pod, pod.run.startContainer(c.plan.name));
      }, delay);
    });
  }

  private async deletePod(pod: ManagedPod): Promise<void> {
    pod.deleting = true;
    await pod.initialized.catch(() => undefined);
    try {
      await pod.run.stopAll();
    } catch (err) {
      this.events.push(`pod ${pod.name}: stopping failed: ${(err as Error).message}`);
    }
    if (this.api.get('Pod', this.namespace, pod.name)) this.api.remove('Pod', this.namespace, pod.name);
    this.pods.delete(pod.daemonSet);
    this.events.push(`pod ${pod.name} gone`);
  }

  private podReady(pod: ManagedPod): boolean {
    const cs = [...pod.run.containers.values()];
    return cs.length === pod.plan.containers.length && cs.every((c) => c.exitCode === undefined && c.probes.ready);
  }

  private syncStatus(pod: ManagedPod): void {
    if (pod.deleting || pod.run.containers.size === 0) return;
    const ready = this.podReady(pod);
    this.updatePodStatus(pod, { phase: 'Running', conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] });
    const ds = this.api.get('DaemonSet', this.namespace, pod.daemonSet);
    if (ds) this.setDaemonSetStatus(ds, 1, ready ? 1 : 0);
  }

  private updatePodStatus(pod: ManagedPod, status: Record<string, unknown>): void {
    const o = this.api.get('Pod', this.namespace, pod.name);
    if (!o || JSON.stringify(o.status) === JSON.stringify(status)) return;
    this.api.update({ ...o, status, metadata: { ...o.metadata, resourceVersion: undefined } });
  }

  private setDaemonSetStatus(ds: KubeObject, desired: number, ready: number): void {
    const status = { observedGeneration: ds.metadata!.generation, desiredNumberScheduled: desired, currentNumberScheduled: desired, numberReady: ready };
    if (JSON.stringify(ds.status) !== JSON.stringify(status)) this.api.update({ ...ds, status, metadata: { ...ds.metadata, resourceVersion: undefined } });
  }
}
