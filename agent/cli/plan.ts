/**
 * `kpr plan`: what the agent would program on one node, from manifests,
 * without a cluster, root or BPF. Runs the agent's own code end to end: the
 * validation of watched objects (an object that fails it is absent to the
 * agent), the planner (planDataplane), and the reconciler's first sync over
 * maps in memory of the agent's sizes (agent/reconcile/dry-run.ts), so
 * frontends another Service owns (ownership rules) and Services over a
 * limit are listed as skipped, as the agent refuses them.
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import type { V1EndpointSlice, V1Node, V1Service } from '@kubernetes/client-node';
import { planDataplane } from '../plan/plan-dataplane.js';
import { LABEL_SERVICE_NAME } from '../k8s/labels.js';
import type { PlanBackend, PlanFrontend, SkippedObject } from '../plan/types.js';
import { loadManifests, type Manifest } from './manifests.js';
import { parseCIDR } from '../net/ip.js';
import { rejectLeadingZeros } from './address-args.js';
import { CliError, UsageError } from './errors.js';
import { flagKind, parseCommand } from './command-spec.js';
import { commandSpec } from './commands.js';
import { AGENT_FLAGS } from '../config/agent-config.js';
import { readConfigFiles } from '../config/config-file.js';
import { kubeProxyNodePortAddresses, nodePortAddressesForMode, UNKNOWN_KUBE_PROXY_FIELDS_MESSAGE } from '../config/kube-proxy-config.js';
import { translateKubeProxyFlags } from '../config/kube-proxy-flags.js';
import { mapSizeOptions } from '../config/agent-config.js';
import { MAP_SIZE_SETTINGS, computeMapSizes, type MapSizeSetting } from '../datapath/map-sizes.js';
import { MAPS } from '../maps/registry.js';
import { validateObject, type ValidatedKind } from '../k8s/validate.js';
import { dryRunSync } from '../reconcile/dry-run.js';
import type { MapCapacities } from '../maps/capacities.js';
import { creationMs } from '../sync/service-plans.js';

/** One frontend as `kpr plan -o json` prints it (fixed field order; datapath hints left out). */
interface FrontendJson {
  service: string;
  portName: string;
  type: string;
  address: string;
  port: number;
  protocol: string;
  backends: Array<{ address: string; port: number }>;
  trafficPolicy: string;
  affinityTimeoutSeconds: number;
  sourceRanges: string[];
  internalBackends?: Array<{ address: string; port: number }>;
  /** 'maglev' when the Service selects by Maglev (rule 40 of docs/semantics.md); absent: random. */
  lbAlgorithm?: 'maglev';
}

export interface PlanJson {
  node: string;
  frontends: FrontendJson[];
  skipped: SkippedObject[];
}

const backendJson = (b: PlanBackend) => ({ address: b.address, port: b.port });

function frontendJson(f: PlanFrontend): FrontendJson {
  const out: FrontendJson = {
    service: f.service,
    portName: f.portName,
    type: f.type,
    address: f.address,
    port: f.port,
    protocol: f.protocol,
    backends: f.backends.map(backendJson),
    trafficPolicy: f.trafficPolicy,
    affinityTimeoutSeconds: f.affinityTimeoutSeconds,
    sourceRanges: f.sourceRanges,
  };
  if (f.internalBackends) out.internalBackends = f.internalBackends.map(backendJson);
  if (f.lbAlgorithm) out.lbAlgorithm = f.lbAlgorithm;
  return out;
}

const NAMESPACED_DEFAULT = new Set(['Service', 'EndpointSlice']);
const VALIDATED = new Set<unknown>(['Service', 'EndpointSlice', 'Node']);

/** "KIND NAMESPACE/NAME" (kubectl's "default" namespace for Services and slices; cluster-scoped objects by name). */
function objectName(m: Manifest): string {
  const md = isRecord(m.obj.metadata) ? m.obj.metadata : {};
  const kind = typeof m.obj.kind === 'string' && m.obj.kind ? m.obj.kind : '<no kind>';
  const name = typeof md.name === 'string' && md.name ? md.name : `<no name> (${m.source})`;
  const ns = typeof md.namespace === 'string' && md.namespace ? md.namespace : NAMESPACED_DEFAULT.has(kind) ? 'default' : '';
  return `${kind} ${ns ? `${ns}/` : ''}${name}`;
}

function isRecord(v: unknown): v is Record<string, any> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Sorts the manifests into what the planner takes; everything else is skipped with a reason. */
export function classify(manifests: readonly Manifest[], nodeName: string, skipped: SkippedObject[]) {
  const services: V1Service[] = [];
  const slices: V1EndpointSlice[] = [];
  let node: V1Node | undefined;
  for (const m of manifests) {
    const o = m.obj;
    const skip = (reason: string) => skipped.push({ object: objectName(m), reason });
    if (!isRecord(o.metadata) || typeof o.metadata.name !== 'string' || o.metadata.name === '') {
      skip('no metadata.name');
      continue;
    }
    // kubectl's default namespace, so hand-written manifests plan as they would apply.
    const withNs = () => ({ ...o, metadata: { ...o.metadata, namespace: o.metadata.namespace || 'default' } });
    // The agent's check of each watched object (agent/k8s/validate.ts): one that fails is absent to it.
    if (VALIDATED.has(o.kind) && (o.kind !== 'Node' || o.metadata.name === nodeName)) {
      const problem = validateObject(o.kind as ValidatedKind, o.kind === 'Node' ? o : withNs());
      if (problem) {
        skip(`invalid: ${problem.field}: ${problem.reason} (the agent ignores the object)`);
        continue;
      }
    }
    switch (o.kind) {
      case 'Service':
        services.push(withNs() as V1Service);
        break;
      case 'EndpointSlice': {
        const s = withNs() as V1EndpointSlice;
        if (!s.metadata?.labels?.[LABEL_SERVICE_NAME]) skip(`no ${LABEL_SERVICE_NAME} label: not keyed to a Service (rule 6 of docs/semantics.md)`);
        else if (s.addressType === 'FQDN') skip('FQDN slices are not proxied (rule 5 of docs/semantics.md)');
        else if (s.addressType !== 'IPv4' && s.addressType !== 'IPv6') skip(`unknown addressType ${JSON.stringify(s.addressType ?? null)}`);
        else slices.push(s);
        break;
      }
      case 'Node':
        if (o.metadata.name === nodeName) node = o as V1Node;
        else skip(`another node (planning for ${JSON.stringify(nodeName)})`);
        break;
      default:
        skip(`kind ${JSON.stringify(o.kind ?? null)} is not used by kpr plan`);
    }
  }
  // Slices whose Service is not among the inputs are ignored by the agent too; say so here.
  const serviceKeys = new Set(services.map((s) => `${s.metadata!.namespace}/${s.metadata!.name}`));
  const used = slices.filter((s) => {
    const key = `${s.metadata!.namespace}/${s.metadata!.labels![LABEL_SERVICE_NAME]}`;
    if (serviceKeys.has(key)) return true;
    skipped.push({ object: `EndpointSlice ${s.metadata!.namespace}/${s.metadata!.name}`, reason: `its Service ${key} is not among the inputs` });
    return false;
  });
  return { services, slices: used, node };
}

/** The map sizes that decide what the agent admits (its --map-size-* flags), and the frontend id space they give. */
export interface PlanMapSizes {
  capacities: MapCapacities;
  /** Frontend ids 1 .. maxFrontendId (the agent's: kpr_svc_meta's max_entries less one). */
  maxFrontendId: number;
}

/** The map-size settings that bound what the agent admits (limits.ts); the flow-state maps' do not. */
export const PLAN_MAP_SIZE_SETTINGS: readonly MapSizeSetting[] = ['services', 'frontends', 'backends', 'sourceRanges'];

/** The agent's map sizes from its flag values (map-sizes.ts, as the agent computes them at start). */
export function planMapSizes(values: Readonly<Record<string, unknown>>): PlanMapSizes {
  const sizes = computeMapSizes(mapSizeOptions(values), { totalMemoryBytes: os.totalmem(), cpus: os.availableParallelism(), possibleCpus: 1 });
  const at = (id: keyof typeof MAPS) => sizes.byMapName[MAPS[id].name]!;
  return {
    capacities: { svc: at('svc'), backend: at('backend'), affinityMatch: at('affinityMatch'), srcRange: at('srcRange') },
    maxFrontendId: at('svcMeta') - 1,
  };
}

export function planJson(opts: {
  nodeName: string;
  files: string[];
  nodePortAddresses?: string[];
  sourceRangesForAllExternal?: boolean;
  externalIPCidrs?: string[];
  mapSizes?: PlanMapSizes;
  lbAlgorithm?: 'random' | 'maglev';
}): PlanJson {
  const skipped: SkippedObject[] = [];
  const manifests = loadManifests(opts.files, skipped);
  const { services, slices, node } = classify(manifests, opts.nodeName, skipped);
  const plan = planDataplane({
    nodeName: opts.nodeName,
    node,
    services,
    endpointSlices: slices,
    nodePortAddresses: opts.nodePortAddresses,
    sourceRangesForAllExternal: opts.sourceRangesForAllExternal,
    externalIPCidrs: opts.externalIPCidrs,
    lbAlgorithm: opts.lbAlgorithm,
  });
  // What the agent's reconciler makes of the plan: ownership, limits, admission (dry-run.ts).
  const plans = new Map<string, PlanFrontend[]>();
  for (const f of plan.frontends) {
    const mine = plans.get(f.service);
    if (mine) mine.push(f);
    else plans.set(f.service, [f]);
  }
  const byKey = new Map(services.map((s) => [`${s.metadata!.namespace}/${s.metadata!.name}`, s]));
  const sizes = opts.mapSizes ?? planMapSizes({});
  const run = dryRunSync({ plans, created: (k) => creationMs(byKey.get(k)), capacities: sizes.capacities, maxFrontendId: sizes.maxFrontendId });
  return { node: opts.nodeName, frontends: run.programmed.map(frontendJson), skipped: skipped.concat(plan.skipped, run.skipped) };
}

/** Readable columns: one line per frontend, backends comma-separated; skipped objects after. */
export function formatPlanTable(p: PlanJson): string {
  const hostPort = (a: string, port: number) => (a.includes(':') ? `[${a}]:${port}` : `${a}:${port}`);
  const rows = [['SERVICE', 'PORT', 'TYPE', 'FRONTEND', 'PROTO', 'POLICY', 'AFFINITY', 'BACKENDS']];
  for (const f of p.frontends) {
    const backends = f.backends.length ? f.backends.map((b) => hostPort(b.address, b.port)).join(',') : '(none)';
    const internal = f.internalBackends ? ` in-node: ${f.internalBackends.map((b) => hostPort(b.address, b.port)).join(',') || '(none)'}` : '';
    const ranges = (f.sourceRanges.length ? ` from ${f.sourceRanges.join(',')}` : '') + (f.lbAlgorithm ? ` (${f.lbAlgorithm})` : '');
    rows.push([
      f.service,
      f.portName || '-',
      f.type,
      hostPort(f.address, f.port),
      f.protocol,
      f.trafficPolicy,
      f.affinityTimeoutSeconds ? `${f.affinityTimeoutSeconds}s` : '-',
      backends + internal + ranges,
    ]);
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  const lines = rows.map((r) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd(),
  );
  let out = `node ${p.node}: ${p.frontends.length} frontends\n${lines.join('\n')}\n`;
  if (p.skipped.length) out += `\nskipped:\n${p.skipped.map((s) => `  ${s.object}: ${s.reason}`).join('\n')}\n`;
  return out;
}

const commaList = (values: readonly string[] | undefined) =>
  values
    ?.flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter(Boolean);

/** The settings `kpr plan` shares with the agent, from the agent's --config files (kpr's own format or a KubeProxyConfiguration). */
function agentFileSettings(files: string[], warn: (line: string) => void) {
  let values: Record<string, string | boolean | Array<string | boolean> | undefined>;
  let proxyMode: string | undefined;
  try {
    const contents = readConfigFiles(files, AGENT_FLAGS);
    for (const u of contents.unknown) warn(`kpr: warning: ${u.file}: ${UNKNOWN_KUBE_PROXY_FIELDS_MESSAGE}: ${u.fields.join(', ')}\n`);
    proxyMode = contents.proxyMode;
    ({ values } = parseArgs({ args: contents.args, options: AGENT_FLAGS, strict: true, allowPositionals: false }));
  } catch (err) {
    throw new CliError(`plan: ${(err as Error).message}`);
  }
  const str = (k: string) => (typeof values[k] === 'string' ? (values[k] as string) : undefined);
  const mapSizes: Record<string, string | undefined> = {};
  for (const setting of PLAN_MAP_SIZE_SETTINGS) mapSizes[MAP_SIZE_SETTINGS[setting].flag] = str(MAP_SIZE_SETTINGS[setting].flag);
  return {
    proxyMode,
    mapSizes,
    nodeName: str('node-name'),
    nodePortAddresses: commaList(str('node-port-addresses') === undefined ? undefined : [str('node-port-addresses')!]),
    externalIPCidrs: commaList(str('external-ip-cidrs') === undefined ? undefined : [str('external-ip-cidrs')!]),
    sourceRangesAllExternal: values['source-ranges-all-external'] === true ? true : undefined,
    lbAlgorithm: str('lb-algorithm'),
  };
}

/** `kpr plan`: the plan as text; warnings (a config file's unknown kube-proxy fields) go to `warn`, stderr by default. */
export function planCommand(argv: string[], warn: (line: string) => void = (line) => process.stderr.write(line)): string {
  const spec = commandSpec('plan');
  let translated: string[];
  let flagMode: string | undefined;
  try {
    ({ argv: translated, proxyMode: flagMode } = translateKubeProxyFlags(argv, (name) => flagKind(spec, name)));
  } catch (err) {
    throw new UsageError(`plan: ${(err as Error).message}`, 'plan');
  }
  const values = parseCommand(spec, translated).values as {
    node?: string;
    'node-name'?: string;
    file?: string[];
    output: string;
    config?: string[];
    'node-port-addresses'?: string[];
    'source-ranges-all-external'?: boolean;
    'source-ranges-for-all-external'?: boolean;
    'external-ip-cidrs'?: string[];
  } & Record<string, unknown>;
  for (const flag of ['node-port-addresses', 'external-ip-cidrs'] as const) for (const v of values[flag] ?? []) rejectLeadingZeros(v, `--${flag}`, 'plan');
  const file = values.config === undefined ? undefined : agentFileSettings(values.config, warn);
  const nodeName = values.node ?? values['node-name'] ?? file?.nodeName;
  if (!nodeName) throw new UsageError('plan: --node NAME is required', 'plan');
  if (!values.file?.length) throw new UsageError('plan: at least one -f PATH is required', 'plan');
  let nodePortAddresses: string[] | undefined;
  try {
    const given = kubeProxyNodePortAddresses(commaList(values['node-port-addresses']) ?? file?.nodePortAddresses ?? [], 'plan: --node-port-addresses');
    nodePortAddresses = nodePortAddressesForMode(given, flagMode ?? file?.proxyMode);
  } catch (err) {
    throw new UsageError((err as Error).message, 'plan');
  }
  const externalIPCidrs = commaList(values['external-ip-cidrs']) ?? file?.externalIPCidrs;
  for (const c of externalIPCidrs ?? [])
    if (!parseCIDR(c)) throw new UsageError(`plan: invalid --external-ip-cidrs entry "${c}" (a CIDR such as 203.0.113.0/24 or 2001:db8::/64)`);
  let mapSizes: PlanMapSizes;
  try {
    const given: Record<string, unknown> = { ...file?.mapSizes };
    for (const setting of PLAN_MAP_SIZE_SETTINGS) {
      const flag = MAP_SIZE_SETTINGS[setting].flag;
      if (values[flag] !== undefined) given[flag] = values[flag];
    }
    mapSizes = planMapSizes(given);
  } catch (err) {
    throw new UsageError(`plan: ${(err as Error).message}`, 'plan');
  }
  const lbAlgorithm = (values['lb-algorithm'] as string | undefined) ?? file?.lbAlgorithm ?? 'random';
  if (lbAlgorithm !== 'random' && lbAlgorithm !== 'maglev') throw new UsageError(`plan: invalid --lb-algorithm "${lbAlgorithm}" (random or maglev)`, 'plan');
  const p = planJson({
    lbAlgorithm,
    nodeName,
    mapSizes,
    files: values.file,
    nodePortAddresses: nodePortAddresses.length ? nodePortAddresses : undefined,
    externalIPCidrs,
    sourceRangesForAllExternal: values['source-ranges-all-external'] ?? values['source-ranges-for-all-external'] ?? file?.sourceRangesAllExternal ?? false,
  });
  return values.output === 'json' ? JSON.stringify(p, null, 2) + '\n' : formatPlanTable(p);
}
