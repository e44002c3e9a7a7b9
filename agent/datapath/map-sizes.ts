/**
 * The run-time capacity (max_entries) of each BPF map, from the agent's
 * flags. Pure: the host's facts (memory, CPUs) come in as arguments.
 *
 * One flag per map that matters (MAP_SIZE_SETTINGS); a map that must be as
 * large as another takes its size (kpr_aff_match holds one entry per
 * affinity backend: the size of kpr_backend). Each size comes from, in order:
 *   1. its --map-size-* flag;
 *   2. for the flow-state maps (kpr_ct, kpr_revnat, kpr_affinity), with
 *      --bpf-map-dynamic-size-ratio R: a share of R x the node's memory,
 *      never below what 3 would give (a floor) nor above DYNAMIC_MAX;
 *   3. kpr_ct: kube-proxy's nf_conntrack_max rule,
 *      max(--conntrack-max-per-core x CPUs, --conntrack-min)
 *      (--conntrack-max-per-core 0: the compiled size, as kube-proxy then
 *      leaves the limit alone);
 *   4. the size compiled into the objects (bpf/include/kpr_maps.h).
 * LRU hash maps are rounded up to a multiple of the possible CPUs: the
 * kernel does that itself with BPF_F_NO_COMMON_LRU (every CPU's LRU list
 * gets the same share), and a pin must read back with the size asked for, or
 * it is not reused.
 *
 * Every LRU map's max_entries (kpr_ct, kpr_revnat, kpr_affinity) is its
 * capacity (its setting) plus lruHeadroom(possible CPUs): the kernel's
 * common LRU hands free elements
 * to each CPU in batches of up to LRU_LOCAL_FREE_TARGET
 * (kernel/bpf/bpf_lru_list.c: bpf_lru_list_pop_free_to_local), and a CPU
 * whose batch runs dry while fewer than a batch are left on the global free
 * list evicts live entries to make one, however many other CPUs hold unused.
 * Without the headroom a map evicts from max_entries - CPUs x 128 on, one
 * entry at a time, not one flow: half-flows below the capacity asked for
 * (test/bpf/ct-half-flows.test.ts: 1,024 entries on 2 CPUs lost flows at
 * 90%). With it, no entry is evicted while the entries in use stay within
 * the capacity. The same holds for a UDP socket's reverse translation
 * (kpr_revnat: an entry lost early makes replies come from the backend's
 * address) and a client's affinity (kpr_affinity).
 *
 * The frontend id space (--map-size-frontends) defaults to one id per
 * FRONTEND_SVC_ENTRIES kpr_svc entries (a master and three backend slots),
 * and the maps indexed or bounded by it take that size: kpr_svc_meta (a
 * name per id), kpr_svc_stats (per-CPU counters per id: one slot when
 * --service-counters=false, which never reads them) and kpr_vip (an address
 * has at least one frontend), so none of them can fill before the ids run out.
 *
 * kpr_maglev_ref (one entry per Maglev entry set, allocated on insert)
 * takes twice the frontend ids: an id has at most two entry sets.
 *
 * Not configurable: kpr_term (a scratch list of one UDP termination run),
 * kpr_config and kpr_stats (arrays of fixed meaning).
 */
import { MAPS, type MapId } from '../maps/registry.js';

export type MapSizeSetting = 'services' | 'frontends' | 'backends' | 'revnat' | 'affinity' | 'conntrack' | 'sourceRanges' | 'maglev';

export interface MapSizeSettingSpec {
  /** The agent flag (and --config key). */
  flag: string;
  /** The maps it sizes: the first is the one it is named after, the others derive from it. */
  maps: readonly MapId[];
  /** What one entry is, for the usage text and docs. */
  what: string;
}

export const MAP_SIZE_SETTINGS: Readonly<Record<MapSizeSetting, MapSizeSettingSpec>> = {
  services: { flag: 'map-size-services', maps: ['svc'], what: 'kpr_svc: one entry per frontend plus one per backend of each frontend' },
  frontends: {
    flag: 'map-size-frontends',
    maps: ['svcMeta', 'svcStats', 'vip'],
    what: 'frontend ids (Service ports × addresses): kpr_svc_meta, kpr_svc_stats, kpr_vip; default a quarter of --map-size-services',
  },
  backends: { flag: 'map-size-backends', maps: ['backend', 'affinityMatch'], what: 'kpr_backend (one per distinct backend) and kpr_aff_match' },
  revnat: { flag: 'map-size-revnat', maps: ['revnat'], what: 'kpr_revnat: one per translated UDP socket / connected flow (LRU)' },
  affinity: { flag: 'map-size-affinity', maps: ['affinity'], what: 'kpr_affinity: one per (client, Service) with sessionAffinity ClientIP (LRU)' },
  conntrack: { flag: 'map-size-conntrack', maps: ['ct'], what: 'kpr_ct: one per flow on the tc path (LRU)' },
  sourceRanges: { flag: 'map-size-source-ranges', maps: ['srcRange'], what: 'kpr_src_range: one per (frontend, loadBalancerSourceRanges CIDR)' },
  maglev: {
    flag: 'map-size-maglev',
    maps: ['maglev'],
    what: 'kpr_maglev: Maglev table chunks of 1,024 entries (2 KiB each, preallocated); a table of M entries takes ceil(M/1024), shared by frontends with the same backends',
  },
};

export const MAP_SIZE_SETTING_NAMES = Object.keys(MAP_SIZE_SETTINGS) as MapSizeSetting[];

/** Bounds of any size: at least one entry; at most 2^26 (a typo such as an extra zero fails instead of allocating gigabytes). */
export const MAP_SIZE_MIN = 1;
export const MAP_SIZE_MAX = 1 << 26;
/** The flow-state maps the memory ratio sizes, and their share of its budget (bytes). */
export const DYNAMIC_SHARES: Readonly<Partial<Record<MapSizeSetting, number>>> = { conntrack: 0.6, revnat: 0.3, affinity: 0.1 };
/** A ratio-derived size is capped here (as Cilium caps its dynamic sizes). */
export const DYNAMIC_MAX = 1 << 24;
/** kube-proxy's defaults (--conntrack-max-per-core, --conntrack-min). */
export const CONNTRACK_MAX_PER_CORE_DEFAULT = 32768;
export const CONNTRACK_MIN_DEFAULT = 131072;
/**
 * The most free elements one CPU takes from an LRU map's global free list at
 * a time (kernel/bpf/bpf_lru_list.c: LOCAL_FREE_TARGET; since 6.16 at most
 * that, less for small maps).
 */
export const LRU_LOCAL_FREE_TARGET = 128;

/**
 * Elements an LRU map holds beyond its capacity so that it never evicts
 * while no more than the capacity are in use: every other CPU may keep a
 * batch of free elements, the CPU taking a batch needs a whole one on the
 * global list, and an update of an existing key takes its new element
 * before it frees the old one (one per CPU at a time).
 */
export function lruHeadroom(possibleCpus: number): number {
  return Math.max(1, possibleCpus) * (LRU_LOCAL_FREE_TARGET + 1);
}

/** Kernel hash table element overhead per entry (struct htab_elem and alignment), for the ratio's estimate. */
const HTAB_ELEM_OVERHEAD = 48;

export interface MapSizeOptions {
  /** --map-size-* values given. */
  explicit: Partial<Record<MapSizeSetting, number>>;
  /** --service-counters (default true): false sizes kpr_svc_stats at one slot. */
  serviceCounters?: boolean;
  /** --bpf-map-dynamic-size-ratio; 0 or undefined: off. */
  dynamicSizeRatio?: number;
  conntrackMaxPerCore: number;
  conntrackMin: number;
}

export interface HostFacts {
  /** Total memory, bytes (os.totalmem()). */
  totalMemoryBytes: number;
  /** CPUs the agent may run on (os.availableParallelism(), as Go's runtime.NumCPU() for kube-proxy). */
  cpus: number;
  /** Possible CPUs (libbpf_num_possible_cpus): what the kernel rounds LRU maps to. */
  possibleCpus: number;
}

export type MapSizeSource = 'flag' | 'ratio' | 'conntrack' | 'default' | 'services';

/** kpr_svc entries per frontend id by default: a frontend with three backends (the default service map's 262,144 give 65,536 ids). */
export const FRONTEND_SVC_ENTRIES = 4;

export interface MapSizePlan {
  /** Entries of each setting (after LRU rounding): an LRU map's is its capacity, byMapName adds lruHeadroom. */
  settings: Record<MapSizeSetting, { entries: number; source: MapSizeSource }>;
  /** Frontend ids (ids 1 .. frontends - 1 index kpr_svc_stats): --map-size-frontends, or a quarter of the service map's entries. */
  frontends: number;
  /** max_entries by pinned map name, for the loader. */
  byMapName: Record<string, number>;
}

/** The size compiled into the objects for a setting (its first map's). */
export function compiledSize(setting: MapSizeSetting): number {
  return MAPS[MAP_SIZE_SETTINGS[setting].maps[0]!].maxEntries;
}

/** One --map-size-* (or conntrack count) value: a whole number within bounds, else a clear error. */
export function parseMapSize(text: string, flag: string, min = MAP_SIZE_MIN): number {
  const t = text.trim();
  if (!/^\d+$/.test(t)) throw new Error(`invalid --${flag} "${text}" (a whole number of entries, ${min}-${MAP_SIZE_MAX})`);
  const n = Number(t);
  if (n < min || n > MAP_SIZE_MAX) throw new Error(`invalid --${flag} ${t}: out of range (${min}-${MAP_SIZE_MAX} entries)`);
  return n;
}

/** --bpf-map-dynamic-size-ratio: a fraction of memory, 0 (off) to 1. */
export function parseSizeRatio(text: string, flag = 'bpf-map-dynamic-size-ratio'): number {
  const t = text.trim();
  const n = Number(t);
  if (t === '' || !/^\d*\.?\d+$/.test(t) || !Number.isFinite(n) || n < 0 || n > 1) {
    throw new Error(`invalid --${flag} "${text}" (a fraction of the node's memory, 0 to 1, e.g. 0.0025; 0 turns it off)`);
  }
  return n;
}

/** Bytes one entry of a map costs in the kernel, roughly (key and value 8-aligned, plus the element header). */
export function entryBytes(id: MapId): number {
  const m = MAPS[id];
  const up8 = (n: number) => Math.ceil(n / 8) * 8;
  return up8(m.key.size) + up8(m.value.size) + HTAB_ELEM_OVERHEAD;
}

function roundUpTo(n: number, multiple: number): number {
  return multiple > 1 ? Math.ceil(n / multiple) * multiple : n;
}

/** kube-proxy's nf_conntrack_max: max(perCore x cpus, min); undefined when perCore is 0 (left alone). */
export function conntrackMax(perCore: number, min: number, cpus: number): number | undefined {
  if (perCore <= 0) return undefined;
  return Math.max(perCore * cpus, min);
}

export function computeMapSizes(opts: MapSizeOptions, host: HostFacts): MapSizePlan {
  /** An LRU map's size as the kernel stores it: a multiple of the possible CPUs, within MAP_SIZE_MAX. */
  const lruRounded = (n: number) => Math.min(roundUpTo(n, host.possibleCpus), roundDownTo(MAP_SIZE_MAX, host.possibleCpus));
  const settings = {} as MapSizePlan['settings'];
  const ratio = opts.dynamicSizeRatio ?? 0;
  const budget = ratio > 0 ? host.totalMemoryBytes * ratio : 0;
  for (const setting of MAP_SIZE_SETTING_NAMES) {
    const spec = MAP_SIZE_SETTINGS[setting];
    const given = opts.explicit[setting];
    let entries: number;
    let source: MapSizeSource;
    if (given !== undefined) {
      entries = given;
      source = 'flag';
    } else if (setting === 'frontends') {
      entries = frontendCapacity(settings.services.entries);
      source = 'services';
    } else {
      // The floor: kube-proxy's conntrack rule for kpr_ct, else the compiled size.
      const ct = setting === 'conntrack' ? conntrackMax(opts.conntrackMaxPerCore, opts.conntrackMin, host.cpus) : undefined;
      entries = ct ?? compiledSize(setting);
      source = ct !== undefined ? 'conntrack' : 'default';
      const share = DYNAMIC_SHARES[setting];
      if (budget > 0 && share !== undefined) {
        const fromRatio = Math.min(DYNAMIC_MAX, Math.floor((budget * share) / entryBytes(spec.maps[0]!)));
        if (fromRatio > entries) {
          entries = fromRatio;
          source = 'ratio';
        }
      }
      entries = Math.min(entries, MAP_SIZE_MAX);
    }
    if (MAPS[spec.maps[0]!].type === 'lru_hash') entries = lruRounded(entries);
    settings[setting] = { entries, source };
  }
  const byMapName: Record<string, number> = {};
  for (const setting of MAP_SIZE_SETTING_NAMES) {
    const entries = settings[setting].entries;
    for (const id of MAP_SIZE_SETTINGS[setting].maps)
      byMapName[MAPS[id].name] = MAPS[id].type === 'lru_hash' ? lruRounded(entries + lruHeadroom(host.possibleCpus)) : entries;
  }
  if (opts.serviceCounters === false) byMapName[MAPS.svcStats.name] = 1;
  // One Maglev table reference per entry set: at most two (EXTERNAL, INTERNAL) per frontend id. Allocated on insert.
  byMapName[MAPS.maglevRef.name] = Math.min(2 * settings.frontends.entries, MAP_SIZE_MAX);
  return { settings, frontends: settings.frontends.entries, byMapName };
}

/** Frontend ids for a service map of `svcEntries`: one per FRONTEND_SVC_ENTRIES, at least 2 (id 0 is never used). */
export function frontendCapacity(svcEntries: number): number {
  return Math.max(2, Math.ceil(svcEntries / FRONTEND_SVC_ENTRIES));
}

function roundDownTo(n: number, multiple: number): number {
  return multiple > 1 ? Math.floor(n / multiple) * multiple : n;
}

/** "kpr_svc=262144 (default), kpr_ct=131072 (conntrack), ..." for the start-up log line. */
export function describeMapSizes(plan: MapSizePlan): Record<string, string> {
  const out: Record<string, string> = {};
  for (const setting of MAP_SIZE_SETTING_NAMES) {
    const s = plan.settings[setting];
    for (const id of MAP_SIZE_SETTINGS[setting].maps) out[MAPS[id].name] = `${s.entries} (${s.source})`;
  }
  if (plan.byMapName[MAPS.svcStats.name] !== plan.frontends) out[MAPS.svcStats.name] = `${plan.byMapName[MAPS.svcStats.name]} (--service-counters=false)`;
  return out;
}
