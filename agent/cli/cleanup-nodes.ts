/**
 * `kpr cleanup-nodes`: the chart's clean-up on `helm uninstall`
 * (charts/kpr/templates/cleanup-hook.yaml, a pre-delete hook Job). It
 * removes kpr's datapath from every node that runs the agent at that moment,
 * and only once the agent has stopped there (a running agent pins its
 * objects again):
 *   1. delete the agent DaemonSet and wait until none of its pods is left;
 *   2. create the clean-up DaemonSet (a manifest the chart renders with the
 *      agent's node selection and tolerations), whose pods run `kpr cleanup`
 *      in an init container and are ready once it succeeded, and wait until
 *      every one of them is ready;
 *   3. delete it, also when the time runs out (then exit 1, naming the nodes
 *      not done and why).
 * It reaches the API server as the agent does (--kubeconfig or
 * --k8s-service-host): the kubernetes ClusterIP stops being translated on a
 * node as soon as that node is cleaned.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { loadKubeConfig } from '../k8s/kubeconfig.js';
import { answerMessage, restRequest } from '../k8s/rest.js';
import { parseDuration } from '../config/duration.js';
import { parseYamlDocuments } from '../input/bounded-yaml.js';
import { CONFIG_YAML_LIMITS } from '../config/config-file.js';
import { readRegularFile } from '../input/bounded-read.js';
import { CliError, UsageError } from './errors.js';
import { rejectLeadingZeros } from './address-args.js';
import { parseCommand } from './command-spec.js';
import { commandSpec } from './commands.js';

interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; generation?: number; ownerReferences?: Array<{ kind?: string; name?: string; controller?: boolean }> };
  spec?: { nodeName?: string; selector?: { matchLabels?: Record<string, string> } };
  status?: Record<string, any>;
}

/** The DaemonSets and pods of one namespace, through the API server. */
class NamespaceApi {
  constructor(
    private readonly kc: KubeConfig,
    private readonly namespace: string,
  ) {}

  private daemonSetPath(name?: string): string {
    return `/apis/apps/v1/namespaces/${encodeURIComponent(this.namespace)}/daemonsets${name ? `/${encodeURIComponent(name)}` : ''}`;
  }

  async getDaemonSet(name: string): Promise<KubeObject | undefined> {
    const a = await restRequest(this.kc, 'GET', this.daemonSetPath(name));
    if (a.status === 404) return undefined;
    if (a.status !== 200) throw new Error(`get DaemonSet ${this.namespace}/${name}: ${answerMessage(a)}`);
    return a.body as KubeObject;
  }

  /** false when it was already gone. */
  async deleteDaemonSet(name: string): Promise<boolean> {
    const a = await restRequest(this.kc, 'DELETE', this.daemonSetPath(name), { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Background' });
    if (a.status === 404) return false;
    if (a.status !== 200 && a.status !== 202) throw new Error(`delete DaemonSet ${this.namespace}/${name}: ${answerMessage(a)}`);
    return true;
  }

  async createDaemonSet(obj: KubeObject): Promise<void> {
    const a = await restRequest(this.kc, 'POST', this.daemonSetPath(), obj);
    if (a.status !== 201 && a.status !== 200) throw new Error(`create DaemonSet ${this.namespace}/${obj.metadata?.name}: ${answerMessage(a)}`);
  }

  /** Pods matching `selector` whose controller is the DaemonSet `owner`. */
  async daemonSetPods(selector: string, owner: string): Promise<KubeObject[]> {
    const a = await restRequest(this.kc, 'GET', `/api/v1/namespaces/${encodeURIComponent(this.namespace)}/pods?labelSelector=${encodeURIComponent(selector)}`);
    if (a.status !== 200) throw new Error(`list pods in ${this.namespace} (${selector}): ${answerMessage(a)}`);
    const items = ((a.body as { items?: KubeObject[] }).items ?? []) as KubeObject[];
    return items.filter((p) => (p.metadata?.ownerReferences ?? []).some((o) => o.kind === 'DaemonSet' && o.name === owner && o.controller !== false));
  }
}

const nodeOf = (pod: KubeObject): string => pod.spec?.nodeName ?? `(unscheduled pod ${pod.metadata?.name})`;
const isReady = (pod: KubeObject): boolean =>
  (pod.status?.conditions ?? []).some((c: { type?: string; status?: string }) => c.type === 'Ready' && c.status === 'True');

/** Why a clean-up pod is not done yet, from its init container's state. */
function notDoneReason(pod: KubeObject): string {
  const init = (pod.status?.initContainerStatuses ?? []).find((s: { name?: string }) => s.name === 'cleanup') as Record<string, any> | undefined;
  const last = init?.lastState?.terminated;
  const lastRun = last ? `; last run exited ${last.exitCode}${last.message ? `: ${String(last.message).trim()}` : ''}` : '';
  if (init?.state?.waiting) return `${init.state.waiting.reason ?? 'waiting'}${lastRun}`;
  if (init?.state?.running) return `kpr cleanup running${lastRun}`;
  if (init?.state?.terminated?.exitCode === 0) return 'cleaned, not ready yet';
  return String(pod.status?.phase ?? 'Pending');
}

interface Progress {
  done: boolean;
  summary: string;
}

/** Done when the DaemonSet controller has seen this generation and every pod it wants is ready. */
function cleanupProgress(ds: KubeObject | undefined, pods: KubeObject[]): Progress {
  const status = ds?.status ?? {};
  const observed = typeof status.observedGeneration === 'number' && status.observedGeneration >= (ds?.metadata?.generation ?? 1);
  const desired: number | undefined = observed ? status.desiredNumberScheduled : undefined;
  const ready = pods.filter(isReady);
  const waiting = pods
    .filter((p) => !isReady(p))
    .map((p) => `${nodeOf(p)} (${notDoneReason(p)})`)
    .sort();
  const done = desired !== undefined && waiting.length === 0 && ready.length >= desired;
  const of = desired === undefined ? 'the DaemonSet controller has not counted the nodes yet' : `${ready.length} of ${desired} nodes cleaned`;
  return { done, summary: waiting.length ? `${of}; not done: ${waiting.join(', ')}` : of };
}

function readDaemonSetManifest(file: string, namespace: string): KubeObject {
  const docs = parseYamlDocuments(readRegularFile(file, 1024 * 1024), CONFIG_YAML_LIMITS).filter((d) => d !== null && d !== undefined);
  const ds = docs[0] as KubeObject | undefined;
  if (docs.length !== 1 || ds?.kind !== 'DaemonSet' || ds.apiVersion !== 'apps/v1' || !ds.metadata?.name) {
    throw new CliError(`${file}: one apps/v1 DaemonSet with a name expected`);
  }
  if (ds.metadata.namespace && ds.metadata.namespace !== namespace)
    throw new CliError(`${file}: the DaemonSet is in namespace ${ds.metadata.namespace}, not ${namespace}`);
  if (!ds.spec?.selector?.matchLabels || Object.keys(ds.spec.selector.matchLabels).length === 0)
    throw new CliError(`${file}: the DaemonSet has no spec.selector.matchLabels`);
  return ds;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Polls `step` until it returns true; `step` reports what it saw, printed when
 * it changes. Returns the last report when the deadline passes first.
 */
async function pollUntil(
  deadline: number,
  pollMs: number,
  log: (line: string) => void,
  step: () => Promise<{ done: boolean; summary: string }>,
): Promise<string | undefined> {
  let said = '';
  for (;;) {
    const p = await step();
    if (p.summary !== said) log(p.summary);
    said = p.summary;
    if (p.done) return undefined;
    if (Date.now() >= deadline) return p.summary;
    await sleep(Math.min(pollMs, Math.max(0, deadline - Date.now())));
  }
}

export async function cleanupNodesCommand(argv: string[], log: (line: string) => void = (l) => process.stdout.write(`${l}\n`)): Promise<string> {
  // Every flag of cleanup-nodes takes a value.
  const values = parseCommand(commandSpec('cleanup-nodes'), argv).values as Record<string, string | undefined>;
  for (const flag of ['namespace', 'agent-daemonset', 'agent-selector', 'cleanup-daemonset'] as const) {
    if (!values[flag]) throw new UsageError(`cleanup-nodes needs --${flag}`, 'cleanup-nodes');
  }
  if (values['k8s-service-host'] !== undefined) rejectLeadingZeros(values['k8s-service-host'], '--k8s-service-host', 'cleanup-nodes');
  const namespace = values.namespace!;
  const agentName = values['agent-daemonset']!;
  let timeoutMs: number;
  let pollMs: number;
  try {
    timeoutMs = parseDuration(values.timeout!, '--timeout');
    pollMs = parseDuration(values['poll-interval']!, '--poll-interval');
  } catch (err) {
    throw new UsageError((err as Error).message, 'cleanup-nodes');
  }
  const manifest = readDaemonSetManifest(values['cleanup-daemonset']!, namespace);
  const cleanupName = manifest.metadata!.name!;
  const cleanupSelector = Object.entries(manifest.spec!.selector!.matchLabels!)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
  const kc = loadKubeConfig({ kubeconfig: values.kubeconfig, serviceHost: values['k8s-service-host'], servicePort: values['k8s-service-port'] });
  const api = new NamespaceApi(kc, namespace);
  const deadline = Date.now() + timeoutMs;
  const timedOut = (what: string, last: string) => new Error(`cleanup-nodes: gave up after ${values.timeout} ${what}: ${last}`);

  log(`cleanup-nodes: API server ${kc.getCurrentCluster()?.server}`);
  log((await api.deleteDaemonSet(agentName)) ? `deleted DaemonSet ${namespace}/${agentName}` : `DaemonSet ${namespace}/${agentName} is already gone`);
  const agentsLeft = await pollUntil(deadline, pollMs, log, async () => {
    const pods = await api.daemonSetPods(values['agent-selector']!, agentName);
    return {
      done: pods.length === 0,
      summary: pods.length ? `waiting for ${pods.length} agent pods to stop: ${pods.map(nodeOf).sort().join(', ')}` : 'every agent pod is gone',
    };
  });
  if (agentsLeft !== undefined) throw timedOut('waiting for the agents to stop (no node was cleaned)', agentsLeft);

  // A clean-up DaemonSet left by an interrupted run is replaced, so every node runs kpr cleanup after its agent stopped.
  if (await api.deleteDaemonSet(cleanupName)) {
    log(`deleted DaemonSet ${namespace}/${cleanupName} left by an earlier run`);
    const left = await pollUntil(deadline, pollMs, log, async () => {
      const gone = (await api.getDaemonSet(cleanupName)) === undefined && (await api.daemonSetPods(cleanupSelector, cleanupName)).length === 0;
      return { done: gone, summary: gone ? 'it is gone' : 'waiting for it to go' };
    });
    if (left !== undefined) throw timedOut(`waiting for the earlier ${cleanupName} to go`, left);
  }
  await api.createDaemonSet({ ...manifest, metadata: { ...manifest.metadata, namespace } });
  log(`created DaemonSet ${namespace}/${cleanupName}: kpr cleanup on every node of the agent`);
  let notDone: string | undefined;
  try {
    notDone = await pollUntil(deadline, pollMs, log, async () =>
      cleanupProgress(await api.getDaemonSet(cleanupName), await api.daemonSetPods(cleanupSelector, cleanupName)),
    );
  } finally {
    await api.deleteDaemonSet(cleanupName).then(
      () => log(`deleted DaemonSet ${namespace}/${cleanupName}`),
      (err: Error) => log(`could not delete DaemonSet ${namespace}/${cleanupName}: ${err.message}`),
    );
  }
  if (notDone !== undefined) throw timedOut('waiting for every node to be cleaned', notDone);
  return 'cleanup-nodes: every node that ran the agent is cleaned\n';
}
