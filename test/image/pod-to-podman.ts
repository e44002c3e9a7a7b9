/**
 * A rendered pod template (a DaemonSet's or a Job's spec.template) → what a
 * kubelet would ask its container runtime for, as `podman run` arguments:
 * one plan per init container and per container, the volumes to prepare on
 * the node, the probes to run. Pure: the runner (pod-runner.ts) does the I/O.
 *
 * Every field of the pod and container specs is either honoured or listed
 * in `ignored` with the reason it has no runtime effect on one node (the
 * scheduler's fields); any other field throws (`UnsupportedPodField`), so a
 * chart change this harness cannot honour is noticed, never dropped.
 *
 * Kubernetes semantics kept (kubelet + a CRI runtime, containerd's defaults):
 *  - command replaces the image's ENTRYPOINT and drops its CMD; args alone
 *    replace CMD; `$(VAR)` in command, args and env values expands from the
 *    container's env defined before it (`$$` is a literal `$`, an unknown
 *    `$(VAR)` stays as written);
 *  - env fieldRef: metadata.name/namespace/uid, metadata.labels['k'],
 *    metadata.annotations['k'], spec.nodeName, spec.serviceAccountName,
 *    status.hostIP(s), status.podIP(s) (the node's address with hostNetwork);
 *  - capabilities: drop then add on the runtime's default set; privileged;
 *    allowPrivilegeEscalation: false → no_new_privs; readOnlyRootFilesystem
 *    with no extra tmpfs (podman adds /run, /tmp, /var/tmp unless told not
 *    to; a kubelet does not); no seccomp profile set → unconfined (the
 *    kubelet's default without --seccomp-default); AppArmor from the pod's or
 *    container's appArmorProfile or the beta annotation;
 *  - runAsUser/runAsGroup/supplementalGroups; runAsNonRoot checked;
 *  - hostNetwork/hostPID/hostIPC; a pod without hostNetwork joins the pod
 *    network namespace the context gives;
 *  - hostPath volumes with their type's checks (DirectoryOrCreate,
 *    Directory, FileOrCreate, File, Socket, CharDevice, BlockDevice),
 *    mountPropagation None → rprivate, HostToContainer → rslave,
 *    Bidirectional → rshared (privileged containers only, as the API server
 *    validates); configMap volumes written from the ConfigMaps given and
 *    mounted read-only; emptyDir; the service account token volume the
 *    kubelet adds unless automountServiceAccountToken is false;
 *  - resources: limits.memory → memory limit without swap, limits.cpu → CFS
 *    quota, requests.cpu → CPU shares (the kubelet's milli × 1024 / 1000);
 *    no pids limit (podman's default is 2048, a kubelet sets none);
 *  - probes: httpGet, tcpSocket and exec with the kubelet's defaults
 *    (period 10 s, timeout 1 s, failureThreshold 3, successThreshold 1).
 */

export type Json = Record<string, unknown>;

export class UnsupportedPodField extends Error {
  constructor(
    readonly field: string,
    why: string,
  ) {
    super(`${field}: ${why} (the image test's pod runner cannot honour it; teach test/image/pod-to-podman.ts or change the chart)`);
    this.name = 'UnsupportedPodField';
  }
}

/** What the node and the cluster give a pod (the kubelet's view). */
export interface PodContext {
  podName: string;
  namespace: string;
  uid: string;
  nodeName: string;
  hostIP: string;
  /** Pod network namespace (a path) for pods without hostNetwork, and its address. */
  podNetwork?: { netns: string; ip: string };
  /** ConfigMaps of the pod's namespace: name → data. */
  configMaps: Record<string, Record<string, string>>;
  /** Where the runner materializes this pod's configMap and emptyDir volumes (a node path). */
  volumeRoot: string;
  /** The service account volume's node directory (token, ca.crt, namespace); needed unless automount is off. */
  serviceAccountDir?: string;
  /** Environment the kubelet adds to every container (KUBERNETES_SERVICE_HOST...), before the container's own. */
  serviceEnv?: Record<string, string>;
}

export type HostPathType = '' | 'DirectoryOrCreate' | 'Directory' | 'FileOrCreate' | 'File' | 'Socket' | 'CharDevice' | 'BlockDevice';

/** What the runner prepares on the node before any container starts. */
export type VolumePrep =
  | { kind: 'hostPath'; volume: string; path: string; type: HostPathType }
  | { kind: 'files'; volume: string; dir: string; files: Array<{ path: string; content: string; mode: number }> }
  | { kind: 'emptyDir'; volume: string; dir: string };

export interface HttpGetAction {
  kind: 'httpGet';
  host: string;
  port: number;
  path: string;
  scheme: 'HTTP' | 'HTTPS';
  headers: Record<string, string>;
}

export interface ProbePlan {
  action: HttpGetAction | { kind: 'tcpSocket'; host: string; port: number } | { kind: 'exec'; command: string[] };
  initialDelaySeconds: number;
  periodSeconds: number;
  timeoutSeconds: number;
  successThreshold: number;
  failureThreshold: number;
}

export interface ContainerPlan {
  name: string;
  init: boolean;
  image: string;
  /** `podman run` flags (no --name, no image, no command). */
  flags: string[];
  /** The ENTRYPOINT override (Kubernetes' command), when set. */
  entrypoint?: string[];
  /** After the image: Kubernetes' args (expanded). */
  args: string[];
  env: Record<string, string>;
  probes: { startup?: ProbePlan; liveness?: ProbePlan; readiness?: ProbePlan };
  /** The effective securityContext, for assertions: capabilities the process must end up with (undefined: privileged). */
  expect: { privileged: boolean; capAdd: string[]; capDropAll: boolean; readOnlyRoot: boolean; user?: number; group?: number; noNewPrivs: boolean };
}

export interface PodPlan {
  hostNetwork: boolean;
  hostPID: boolean;
  terminationGracePeriodSeconds: number;
  restartPolicy: 'Always' | 'OnFailure' | 'Never';
  volumes: VolumePrep[];
  initContainers: ContainerPlan[];
  containers: ContainerPlan[];
  /** Fields with no effect on one node's runtime, and why. */
  ignored: Array<{ field: string; why: string }>;
}

const SCHEDULING = 'scheduling only: decides which node, not how the node runs the pod';
const POD_IGNORED: Record<string, string> = {
  priorityClassName: `${SCHEDULING} (and eviction order)`,
  priority: SCHEDULING,
  nodeSelector: `${SCHEDULING} (the runner checks the node fits)`,
  affinity: `${SCHEDULING} (the runner checks the node fits)`,
  tolerations: SCHEDULING,
  imagePullSecrets: "registry credentials: the image is already in the node's store",
};
const POD_HANDLED = new Set([
  'hostNetwork',
  'hostPID',
  'hostIPC',
  'securityContext',
  'initContainers',
  'containers',
  'volumes',
  'serviceAccountName',
  'serviceAccount',
  'automountServiceAccountToken',
  'dnsPolicy',
  'terminationGracePeriodSeconds',
  'restartPolicy',
  'enableServiceLinks',
]);
const CONTAINER_HANDLED = new Set([
  'name',
  'image',
  'imagePullPolicy',
  'command',
  'args',
  'env',
  'workingDir',
  'securityContext',
  'resources',
  'volumeMounts',
  'startupProbe',
  'livenessProbe',
  'readinessProbe',
  'ports',
  'terminationMessagePath',
  'terminationMessagePolicy',
  'stdin',
  'tty',
]);
const SC_POD = new Set(['appArmorProfile', 'runAsUser', 'runAsGroup', 'runAsNonRoot', 'seccompProfile', 'seLinuxOptions', 'supplementalGroups']);
const SC_CONTAINER = new Set([
  'privileged',
  'allowPrivilegeEscalation',
  'capabilities',
  'readOnlyRootFilesystem',
  'runAsUser',
  'runAsGroup',
  'runAsNonRoot',
  'seLinuxOptions',
  'seccompProfile',
  'appArmorProfile',
  'procMount',
]);
const PROBE_KEYS = new Set(['httpGet', 'tcpSocket', 'exec', 'initialDelaySeconds', 'periodSeconds', 'timeoutSeconds', 'successThreshold', 'failureThreshold']);
const APPARMOR_ANNOTATION = 'container.apparmor.security.beta.kubernetes.io/';

function obj(v: unknown, field: string): Json {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw new UnsupportedPodField(field, `expected an object, got ${JSON.stringify(v)}`);
  return v as Json;
}

function arr(v: unknown, field: string): Json[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new UnsupportedPodField(field, `expected a list, got ${JSON.stringify(v)}`);
  return v as Json[];
}

function strings(v: unknown, field: string): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) throw new UnsupportedPodField(field, `expected a list of strings, got ${JSON.stringify(v)}`);
  return v as string[];
}

function onlyKeys(o: Json, known: Set<string>, field: string): void {
  for (const k of Object.keys(o)) if (!known.has(k)) throw new UnsupportedPodField(`${field}.${k}`, 'unknown to the harness');
}

/** Kubernetes' $(VAR) expansion (third_party/forked/golang/expansion): `$$` → `$`, unknown names kept as written. */
export function expandVars(input: string, vars: Record<string, string>): string {
  let out = '';
  for (let i = 0; i < input.length; i++) {
    const c = input[i];
    if (c !== '$' || i + 1 >= input.length) {
      out += c;
      continue;
    }
    const next = input[i + 1];
    if (next === '$') {
      out += '$';
      i++;
    } else if (next === '(') {
      const end = input.indexOf(')', i + 2);
      if (end < 0) {
        out += input.slice(i);
        break;
      }
      const name = input.slice(i + 2, end);
      out += Object.prototype.hasOwnProperty.call(vars, name) ? vars[name] : `$(${name})`;
      i = end;
    } else {
      out += c;
    }
  }
  return out;
}

/** A Kubernetes quantity → bytes (memory) or a plain number. */
export function parseQuantity(q: unknown, field: string): number {
  const s = String(q);
  const m = /^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T|m)?$/.exec(s);
  if (!m) throw new UnsupportedPodField(field, `quantity ${JSON.stringify(q)} not understood`);
  const mult: Record<string, number> = { Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, k: 1e3, M: 1e6, G: 1e9, T: 1e12, m: 1e-3 };
  return Number(m[1]) * (m[2] ? mult[m[2]] : 1);
}

function fieldRef(path: string, pod: Json, ctx: PodContext, spec: Json, field: string): string {
  const meta = obj(pod.metadata, 'metadata');
  const labelOrAnn = /^metadata\.(labels|annotations)\['([^']+)'\]$/.exec(path);
  if (labelOrAnn) return String(obj(meta[labelOrAnn[1]], `metadata.${labelOrAnn[1]}`)[labelOrAnn[2]] ?? '');
  const hostNetwork = spec.hostNetwork === true;
  const podIP = hostNetwork ? ctx.hostIP : ctx.podNetwork?.ip;
  switch (path) {
    case 'metadata.name':
      return ctx.podName;
    case 'metadata.namespace':
      return ctx.namespace;
    case 'metadata.uid':
      return ctx.uid;
    case 'spec.nodeName':
      return ctx.nodeName;
    case 'spec.serviceAccountName':
      return String(spec.serviceAccountName ?? spec.serviceAccount ?? 'default');
    case 'status.hostIP':
    case 'status.hostIPs':
      return ctx.hostIP;
    case 'status.podIP':
    case 'status.podIPs':
      if (!podIP) throw new UnsupportedPodField(field, 'a pod IP without a pod network in the context');
      return podIP;
    default:
      throw new UnsupportedPodField(field, `fieldRef ${path} not supported`);
  }
}

function containerEnv(c: Json, pod: Json, ctx: PodContext, spec: Json, field: string): Record<string, string> {
  const env: Record<string, string> = { ...(ctx.serviceEnv ?? {}) };
  for (const [i, e] of arr(c.env, `${field}.env`).entries()) {
    const f = `${field}.env[${i}]`;
    onlyKeys(e, new Set(['name', 'value', 'valueFrom']), f);
    const name = String(e.name);
    if (e.valueFrom !== undefined) {
      const from = obj(e.valueFrom, `${f}.valueFrom`);
      if (from.fieldRef !== undefined) {
        const ref = obj(from.fieldRef, `${f}.valueFrom.fieldRef`);
        onlyKeys(ref, new Set(['fieldPath', 'apiVersion']), `${f}.valueFrom.fieldRef`);
        env[name] = fieldRef(String(ref.fieldPath), pod, ctx, spec, `${f}.valueFrom.fieldRef`);
      } else if (from.configMapKeyRef !== undefined) {
        const ref = obj(from.configMapKeyRef, `${f}.valueFrom.configMapKeyRef`);
        const value = ctx.configMaps[String(ref.name)]?.[String(ref.key)];
        if (value === undefined && ref.optional !== true)
          throw new UnsupportedPodField(`${f}.valueFrom.configMapKeyRef`, `ConfigMap ${String(ref.name)} key ${String(ref.key)} not found`);
        if (value !== undefined) env[name] = value;
      } else {
        throw new UnsupportedPodField(`${f}.valueFrom`, `${Object.keys(from).join(',')} not supported`);
      }
    } else {
      env[name] = expandVars(String(e.value ?? ''), env);
    }
  }
  return env;
}

function probe(p: unknown, c: Json, ctx: PodContext, hostNetwork: boolean, field: string): ProbePlan | undefined {
  if (p === undefined || p === null) return undefined;
  const o = obj(p, field);
  onlyKeys(o, PROBE_KEYS, field);
  const ports = arr(c.ports, 'ports');
  const port = (v: unknown, f: string): number => {
    if (typeof v === 'number') return v;
    if (typeof v === 'string' && /^[0-9]+$/.test(v)) return Number(v);
    const named = ports.find((x) => x.name === v);
    if (!named) throw new UnsupportedPodField(f, `named port ${JSON.stringify(v)} is not among the container's ports`);
    return Number(named.containerPort);
  };
  const defaultHost = hostNetwork ? ctx.hostIP : (ctx.podNetwork?.ip ?? '');
  let action: ProbePlan['action'];
  if (o.httpGet !== undefined) {
    const h = obj(o.httpGet, `${field}.httpGet`);
    onlyKeys(h, new Set(['path', 'port', 'host', 'scheme', 'httpHeaders']), `${field}.httpGet`);
    const headers: Record<string, string> = {};
    for (const x of arr(h.httpHeaders, `${field}.httpGet.httpHeaders`)) headers[String(x.name)] = String(x.value);
    const scheme = String(h.scheme ?? 'HTTP');
    if (scheme !== 'HTTP' && scheme !== 'HTTPS') throw new UnsupportedPodField(`${field}.httpGet.scheme`, scheme);
    action = {
      kind: 'httpGet',
      host: String(h.host ?? defaultHost),
      port: port(h.port, `${field}.httpGet.port`),
      path: String(h.path ?? '/'),
      scheme,
      headers,
    };
  } else if (o.tcpSocket !== undefined) {
    const t = obj(o.tcpSocket, `${field}.tcpSocket`);
    action = { kind: 'tcpSocket', host: String(t.host ?? defaultHost), port: port(t.port, `${field}.tcpSocket.port`) };
  } else if (o.exec !== undefined) {
    action = { kind: 'exec', command: strings(obj(o.exec, `${field}.exec`).command, `${field}.exec.command`) };
  } else {
    throw new UnsupportedPodField(field, 'no httpGet, tcpSocket or exec');
  }
  const n = (k: string, d: number) => (o[k] === undefined ? d : Number(o[k]));
  return {
    action,
    initialDelaySeconds: n('initialDelaySeconds', 0),
    periodSeconds: n('periodSeconds', 10),
    timeoutSeconds: n('timeoutSeconds', 1),
    successThreshold: n('successThreshold', 1),
    failureThreshold: n('failureThreshold', 3),
  };
}

function mountOption(value: string, field: string): string {
  if (/[,=]/.test(value)) throw new UnsupportedPodField(field, `path ${JSON.stringify(value)} has a comma or '=' (podman --mount cannot say it)`);
  return value;
}

interface VolumeSource {
  /** Node path of the volume's root. */
  path: string;
  /** Always mounted read-only (configMap, the service account token). */
  forceReadOnly: boolean;
}

function volumes(spec: Json, pod: Json, ctx: PodContext): { prep: VolumePrep[]; sources: Map<string, VolumeSource> } {
  const prep: VolumePrep[] = [];
  const sources = new Map<string, VolumeSource>();
  for (const [i, v] of arr(spec.volumes, 'spec.volumes').entries()) {
    const f = `spec.volumes[${i}]`;
    const name = String(v.name);
    const kinds = Object.keys(v).filter((k) => k !== 'name');
    if (kinds.length !== 1) throw new UnsupportedPodField(f, `exactly one volume source expected, got ${kinds.join(',') || 'none'}`);
    const kind = kinds[0];
    if (kind === 'hostPath') {
      const h = obj(v.hostPath, `${f}.hostPath`);
      onlyKeys(h, new Set(['path', 'type']), `${f}.hostPath`);
      const type = String(h.type ?? '') as HostPathType;
      if (!['', 'DirectoryOrCreate', 'Directory', 'FileOrCreate', 'File', 'Socket', 'CharDevice', 'BlockDevice'].includes(type)) {
        throw new UnsupportedPodField(`${f}.hostPath.type`, type);
      }
      prep.push({ kind: 'hostPath', volume: name, path: String(h.path), type });
      sources.set(name, { path: String(h.path), forceReadOnly: false });
    } else if (kind === 'configMap') {
      const c = obj(v.configMap, `${f}.configMap`);
      onlyKeys(c, new Set(['name', 'items', 'defaultMode', 'optional']), `${f}.configMap`);
      const data = ctx.configMaps[String(c.name)];
      if (!data && c.optional !== true)
        throw new UnsupportedPodField(`${f}.configMap`, `ConfigMap ${String(c.name)} is not in the context (a kubelet would wait for it)`);
      const mode = c.defaultMode === undefined ? 0o644 : Number(c.defaultMode);
      const items =
        c.items === undefined
          ? Object.keys(data ?? {})
              .sort()
              .map((key) => ({ key, path: key, mode }))
          : arr(c.items, `${f}.configMap.items`).map((it) => ({
              key: String(it.key),
              path: String(it.path),
              mode: it.mode === undefined ? mode : Number(it.mode),
            }));
      const dir = `${ctx.volumeRoot}/${name}`;
      const files = items.map((it) => {
        const content = data?.[it.key];
        if (content === undefined) throw new UnsupportedPodField(`${f}.configMap.items`, `ConfigMap ${String(c.name)} has no key ${it.key}`);
        if (it.path.startsWith('/') || it.path.split('/').includes('..')) throw new UnsupportedPodField(`${f}.configMap.items`, `path ${it.path}`);
        return { path: it.path, content, mode: it.mode };
      });
      prep.push({ kind: 'files', volume: name, dir, files });
      sources.set(name, { path: dir, forceReadOnly: true });
    } else if (kind === 'emptyDir') {
      const e = obj(v.emptyDir, `${f}.emptyDir`);
      onlyKeys(e, new Set(['medium', 'sizeLimit']), `${f}.emptyDir`);
      if (e.medium !== undefined && e.medium !== '' && e.medium !== 'Memory') throw new UnsupportedPodField(`${f}.emptyDir.medium`, String(e.medium));
      const dir = `${ctx.volumeRoot}/${name}`;
      prep.push({ kind: 'emptyDir', volume: name, dir });
      sources.set(name, { path: dir, forceReadOnly: false });
    } else {
      throw new UnsupportedPodField(`${f}.${kind}`, 'volume source not supported');
    }
  }
  void pod;
  return { prep, sources };
}

function securityFlags(sc: Json, podSc: Json, annotation: string | undefined, field: string): { flags: string[]; expect: ContainerPlan['expect'] } {
  onlyKeys(sc, SC_CONTAINER, `${field}.securityContext`);
  const flags: string[] = [];
  const privileged = sc.privileged === true;
  if (privileged) flags.push('--privileged');
  if (sc.allowPrivilegeEscalation === false) {
    if (privileged) throw new UnsupportedPodField(`${field}.securityContext`, 'privileged with allowPrivilegeEscalation: false (the API server rejects it)');
    flags.push('--security-opt', 'no-new-privileges');
  }
  const caps = obj(sc.capabilities, `${field}.securityContext.capabilities`);
  onlyKeys(caps, new Set(['add', 'drop']), `${field}.securityContext.capabilities`);
  const drop = strings(caps.drop, `${field}.securityContext.capabilities.drop`);
  const add = strings(caps.add, `${field}.securityContext.capabilities.add`);
  const capName = (c: string) => (c === 'ALL' ? 'ALL' : `CAP_${c.replace(/^CAP_/, '')}`);
  if (drop.length) flags.push('--cap-drop', drop.map(capName).join(','));
  if (add.length) flags.push('--cap-add', add.map(capName).join(','));
  const readOnlyRoot = sc.readOnlyRootFilesystem === true;
  if (readOnlyRoot) flags.push('--read-only', '--read-only-tmpfs=false');
  const pick = (k: string) => (sc[k] !== undefined ? sc[k] : podSc[k]);
  const user = pick('runAsUser');
  const group = pick('runAsGroup');
  if (group !== undefined && user === undefined)
    throw new UnsupportedPodField(`${field}.securityContext.runAsGroup`, "runAsGroup without runAsUser (the image's user is unknown to the harness)");
  if (user !== undefined) flags.push('--user', group !== undefined ? `${Number(user)}:${Number(group)}` : String(Number(user)));
  if (pick('runAsNonRoot') === true) {
    if (user === undefined)
      throw new UnsupportedPodField(`${field}.securityContext.runAsNonRoot`, "runAsNonRoot without runAsUser (the image's user is unknown to the harness)");
    if (Number(user) === 0)
      throw new UnsupportedPodField(`${field}.securityContext.runAsNonRoot`, 'runAsNonRoot with runAsUser 0: the kubelet refuses to start the container');
  }
  const se = obj(pick('seLinuxOptions'), `${field}.securityContext.seLinuxOptions`);
  onlyKeys(se, new Set(['user', 'role', 'type', 'level']), `${field}.securityContext.seLinuxOptions`);
  for (const k of ['user', 'role', 'type', 'level']) if (se[k] !== undefined) flags.push('--security-opt', `label=${k}:${String(se[k])}`);
  const seccomp = obj(pick('seccompProfile'), `${field}.securityContext.seccompProfile`);
  const seccompType = seccomp.type === undefined ? 'Unconfined' : String(seccomp.type);
  if (seccompType === 'Unconfined') {
    if (!privileged) flags.push('--security-opt', 'seccomp=unconfined');
  } else if (seccompType !== 'RuntimeDefault') {
    throw new UnsupportedPodField(`${field}.securityContext.seccompProfile`, `type ${seccompType}`);
  }
  const aa = obj(pick('appArmorProfile'), `${field}.securityContext.appArmorProfile`);
  const aaType =
    aa.type !== undefined
      ? String(aa.type)
      : annotation === 'unconfined'
        ? 'Unconfined'
        : annotation === undefined || annotation === 'runtime/default'
          ? 'RuntimeDefault'
          : `annotation ${annotation}`;
  if (aaType === 'Unconfined') {
    if (!privileged) flags.push('--security-opt', 'apparmor=unconfined');
  } else if (aaType !== 'RuntimeDefault') {
    throw new UnsupportedPodField(`${field}.securityContext.appArmorProfile`, aaType);
  }
  if (sc.procMount !== undefined && sc.procMount !== 'Default') throw new UnsupportedPodField(`${field}.securityContext.procMount`, String(sc.procMount));
  return {
    flags,
    expect: {
      privileged,
      capAdd: add.map((c) => c.replace(/^CAP_/, '')),
      capDropAll: drop.includes('ALL'),
      readOnlyRoot,
      user: user === undefined ? undefined : Number(user),
      group: group === undefined ? undefined : Number(group),
      noNewPrivs: sc.allowPrivilegeEscalation === false,
    },
  };
}

function resourceFlags(r: unknown, field: string): string[] {
  const res = obj(r, field);
  onlyKeys(res, new Set(['requests', 'limits']), field);
  const flags: string[] = [];
  const limits = obj(res.limits, `${field}.limits`);
  const requests = obj(res.requests, `${field}.requests`);
  for (const [k, set] of [
    ['limits', limits],
    ['requests', requests],
  ] as const) {
    for (const name of Object.keys(set)) {
      if (!['cpu', 'memory', 'ephemeral-storage'].includes(name)) throw new UnsupportedPodField(`${field}.${k}.${name}`, 'resource not supported');
    }
  }
  if (limits.memory !== undefined) {
    const bytes = Math.floor(parseQuantity(limits.memory, `${field}.limits.memory`));
    flags.push('--memory', String(bytes), '--memory-swap', String(bytes));
  }
  if (limits.cpu !== undefined) flags.push('--cpus', String(parseQuantity(limits.cpu, `${field}.limits.cpu`)));
  const cpuRequest = requests.cpu ?? limits.cpu;
  if (cpuRequest !== undefined)
    flags.push('--cpu-shares', String(Math.max(2, Math.floor((parseQuantity(cpuRequest, `${field}.requests.cpu`) * 1000 * 1024) / 1000))));
  return flags;
}

function container(c: Json, init: boolean, index: number, pod: Json, spec: Json, ctx: PodContext, sources: Map<string, VolumeSource>): ContainerPlan {
  const field = `spec.${init ? 'initContainers' : 'containers'}[${index}]`;
  onlyKeys(c, CONTAINER_HANDLED, field);
  if (c.stdin === true || c.tty === true) throw new UnsupportedPodField(`${field}.stdin/tty`, 'interactive containers');
  if (init)
    for (const p of ['startupProbe', 'livenessProbe', 'readinessProbe'])
      if (c[p] !== undefined) throw new UnsupportedPodField(`${field}.${p}`, 'probes on an init container (the API server rejects them)');
  const name = String(c.name);
  const hostNetwork = spec.hostNetwork === true;
  const flags: string[] = [];
  const pullPolicy = String(c.imagePullPolicy ?? 'IfNotPresent');
  const pull: Record<string, string> = { IfNotPresent: 'missing', Always: 'always', Never: 'never' };
  if (!pull[pullPolicy]) throw new UnsupportedPodField(`${field}.imagePullPolicy`, pullPolicy);
  flags.push(`--pull=${pull[pullPolicy]}`);
  if (hostNetwork) flags.push('--network', 'host');
  else if (ctx.podNetwork) flags.push('--network', `ns:${ctx.podNetwork.netns}`);
  else throw new UnsupportedPodField('spec.hostNetwork', 'a pod without hostNetwork needs a pod network namespace in the context');
  if (spec.hostPID === true) flags.push('--pid', 'host');
  if (spec.hostIPC === true) flags.push('--ipc', 'host');
  // No pids limit, as a kubelet (podman's default is 2048).
  flags.push('--pids-limit', '-1');
  const podSc = obj(spec.securityContext, 'spec.securityContext');
  const annotation = obj(obj(pod.metadata, 'metadata').annotations, 'metadata.annotations')[`${APPARMOR_ANNOTATION}${name}`];
  const sec = securityFlags(obj(c.securityContext, `${field}.securityContext`), podSc, annotation === undefined ? undefined : String(annotation), field);
  flags.push(...sec.flags);
  for (const g of arr(podSc.supplementalGroups, 'spec.securityContext.supplementalGroups')) flags.push('--group-add', String(g));
  flags.push(...resourceFlags(c.resources, `${field}.resources`));
  if (c.workingDir !== undefined) flags.push('--workdir', String(c.workingDir));
  const env = containerEnv(c, pod, ctx, spec, field);
  for (const [k, v] of Object.entries(env)) flags.push('--env', `${k}=${v}`);
  const grace = spec.terminationGracePeriodSeconds === undefined ? 30 : Number(spec.terminationGracePeriodSeconds);
  flags.push('--stop-timeout', String(grace));
  const mounted = new Set<string>();
  for (const [i, m] of arr(c.volumeMounts, `${field}.volumeMounts`).entries()) {
    const f = `${field}.volumeMounts[${i}]`;
    onlyKeys(m, new Set(['name', 'mountPath', 'readOnly', 'mountPropagation', 'subPath']), f);
    const src = sources.get(String(m.name));
    if (!src) throw new UnsupportedPodField(`${f}.name`, `no volume named ${String(m.name)}`);
    const dest = String(m.mountPath);
    if (mounted.has(dest)) throw new UnsupportedPodField(`${f}.mountPath`, `${dest} mounted twice`);
    mounted.add(dest);
    const sub = m.subPath === undefined ? '' : String(m.subPath);
    if (sub.startsWith('/') || sub.split('/').includes('..')) throw new UnsupportedPodField(`${f}.subPath`, sub);
    const propagation = String(m.mountPropagation ?? 'None');
    const prop: Record<string, string> = { None: 'rprivate', HostToContainer: 'rslave', Bidirectional: 'rshared' };
    if (!prop[propagation]) throw new UnsupportedPodField(`${f}.mountPropagation`, propagation);
    if (propagation === 'Bidirectional' && !sec.expect.privileged)
      throw new UnsupportedPodField(`${f}.mountPropagation`, 'Bidirectional on a container that is not privileged (the API server rejects it)');
    const readOnly = m.readOnly === true || src.forceReadOnly;
    const source = sub ? `${src.path}/${sub}` : src.path;
    flags.push(
      '--mount',
      [
        `type=bind`,
        `source=${mountOption(source, f)}`,
        `destination=${mountOption(dest, f)}`,
        ...(readOnly ? ['ro=true'] : []),
        `bind-propagation=${prop[propagation]}`,
      ].join(','),
    );
  }
  const automount = spec.automountServiceAccountToken !== false;
  const saPath = '/var/run/secrets/kubernetes.io/serviceaccount';
  if (automount && !mounted.has(saPath)) {
    if (!ctx.serviceAccountDir)
      throw new UnsupportedPodField('spec.automountServiceAccountToken', 'the service account volume needs a directory in the context');
    flags.push(
      '--mount',
      `type=bind,source=${mountOption(ctx.serviceAccountDir, 'serviceAccountDir')},destination=${saPath},ro=true,bind-propagation=rprivate`,
    );
  }
  const command = c.command === undefined ? undefined : strings(c.command, `${field}.command`).map((s) => expandVars(s, env));
  const args = strings(c.args, `${field}.args`).map((s) => expandVars(s, env));
  return {
    name,
    init,
    image: String(c.image),
    flags,
    ...(command ? { entrypoint: command } : {}),
    args,
    env,
    probes: {
      startup: probe(c.startupProbe, c, ctx, hostNetwork, `${field}.startupProbe`),
      liveness: probe(c.livenessProbe, c, ctx, hostNetwork, `${field}.livenessProbe`),
      readiness: probe(c.readinessProbe, c, ctx, hostNetwork, `${field}.readinessProbe`),
    },
    expect: sec.expect,
  };
}

/** The pod template (`{metadata, spec}`) as a kubelet would run it on the context's node. */
export function planPod(template: Json, ctx: PodContext): PodPlan {
  const spec = obj(template.spec, 'spec');
  const ignored: PodPlan['ignored'] = [];
  for (const k of Object.keys(spec)) {
    if (POD_HANDLED.has(k)) continue;
    if (POD_IGNORED[k]) ignored.push({ field: `spec.${k}`, why: POD_IGNORED[k] });
    else throw new UnsupportedPodField(`spec.${k}`, 'unknown to the harness');
  }
  onlyKeys(obj(spec.securityContext, 'spec.securityContext'), SC_POD, 'spec.securityContext');
  const dns = String(spec.dnsPolicy ?? 'ClusterFirst');
  const hostNetwork = spec.hostNetwork === true;
  // Default (and ClusterFirst with hostNetwork, which falls back to it): the node's resolv.conf, what podman gives.
  if (!(dns === 'Default' || (dns === 'ClusterFirst' && hostNetwork)))
    throw new UnsupportedPodField('spec.dnsPolicy', `${dns} needs a cluster DNS the harness does not have`);
  if (spec.enableServiceLinks !== undefined && typeof spec.enableServiceLinks !== 'boolean')
    throw new UnsupportedPodField('spec.enableServiceLinks', String(spec.enableServiceLinks));
  const restartPolicy = String(spec.restartPolicy ?? 'Always') as PodPlan['restartPolicy'];
  if (!['Always', 'OnFailure', 'Never'].includes(restartPolicy)) throw new UnsupportedPodField('spec.restartPolicy', restartPolicy);
  const meta = obj(template.metadata, 'metadata');
  for (const k of Object.keys(meta))
    if (!['labels', 'annotations', 'name', 'namespace'].includes(k)) throw new UnsupportedPodField(`metadata.${k}`, 'unknown to the harness');
  const { prep, sources } = volumes(spec, template, ctx);
  const initContainers = arr(spec.initContainers, 'spec.initContainers').map((c, i) => container(c, true, i, template, spec, ctx, sources));
  const containers = arr(spec.containers, 'spec.containers').map((c, i) => container(c, false, i, template, spec, ctx, sources));
  if (containers.length === 0) throw new UnsupportedPodField('spec.containers', 'a pod needs a container');
  return {
    hostNetwork,
    hostPID: spec.hostPID === true,
    terminationGracePeriodSeconds: spec.terminationGracePeriodSeconds === undefined ? 30 : Number(spec.terminationGracePeriodSeconds),
    restartPolicy,
    volumes: prep,
    initContainers,
    containers,
    ignored,
  };
}

/** `podman run` arguments for one container of the plan (after the global flags). */
export function podmanRunArgs(c: ContainerPlan, containerName: string, extra: string[] = []): string[] {
  return ['run', '--name', containerName, ...c.flags, ...extra, ...(c.entrypoint ? ['--entrypoint', JSON.stringify(c.entrypoint)] : []), c.image, ...c.args];
}
