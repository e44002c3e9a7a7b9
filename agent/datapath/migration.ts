/**
 * A live migration of kpr's maps to a new set (a new layout version, another
 * size, or a pin that is not kpr's map), in the order docs/architecture.md
 * ("Upgrades: versioned pins and live migration") explains:
 *
 *  1. at load (the loader): the new set is created in staging/ (libbpf,
 *     from the objects), and the maps the agent owns are copied into it from
 *     the old set, converted to this release's layouts, so ids survive and
 *     the reconciler adopts them as on any restart; kpr_config gets
 *     KPR_CFG_F_MIGRATING. The new programs are loaded with the old state
 *     maps as their *_prev maps. The previous programs keep serving on the
 *     complete old set meanwhile;
 *  2. the initial sync brings the new set to the plan (nothing reads it yet);
 *  3. the socket programs (bpf_link_update on kpr's cgroup links), then
 *     the tc programs (tcx link update / cls_bpf replace) are swapped to the
 *     new set. The state maps (conntrack, reverse NAT, affinity) are not
 *     copied here: a state-map miss reads through to the old map, whose
 *     entries stay the freshest until the old programs are gone. A copy
 *     made here would go stale as the old programs kept rewriting its keys
 *     (a client reusing the port of a closed flow between the copy and the
 *     tc swap), and the new programs, finding the stale copy, would never
 *     read through to the fresh entry;
 *  4. finish(), once every program runs on the new set: every entry of the
 *     old state maps is copied one by one, never over an entry the new
 *     programs made since the swap (those are the fresher: a new flow's
 *     entries go to both maps); the read-through ends; the staged pins move
 *     into maps/ (rename: atomic per pin) and the old pins go; the programs
 *     are loaded once more without the old maps and swapped in again, so
 *     the old maps are freed (same maps, no window).
 */
import fs from 'node:fs';
import path from 'node:path';
import { BpfMap } from '../../native/index.js';
import { CFG_FLAG, mapCodecs } from '../maps/layout.js';
import { MAP_BY_NAME, MAPS, layoutsAt, type MapSpec } from '../maps/registry.js';
import type { Logger } from '../log/log.js';
import { copyMapEntries, type CopyMode, type CopyResult } from './map-copy.js';
import type { MapMigration, MigrationReason } from './migration-plan.js';
import { pinDirPath } from './pin-scan.js';
import { mapPinDir, mapPinName, mapStagingDir } from './pins.js';

/** The placeholder maps the socket and tc programs read through to during a migration (bpf/include/kpr_migrate.h), by the state map they stand for. */
export const PREV_MAPS: Readonly<Record<string, string>> = { kpr_ct: 'kpr_ct_prev', kpr_revnat: 'kpr_revnat_prev', kpr_affinity: 'kpr_aff_prev' };

export interface MigrationReasonLine {
  map: string;
  reason: MigrationReason;
  detail: string;
}

/** What finish() did, for the log line and the tests. */
export interface MigrationSummary {
  copied: Record<string, CopyResult>;
  ms: number;
}

interface OldMap {
  spec: MapSpec;
  map: BpfMap;
  version: number;
  /** Its pin in maps/ (removed at the end, unless the new map's pin replaced it). */
  pin: string;
}

const configKey = mapCodecs(MAPS.config).key.encode(0);
const CONFIG_FLAGS_AT = MAPS.config.value.at.flags;

/** Sets or clears KPR_CFG_F_MIGRATING in a kpr_config map, keeping the rest. */
export function setMigratingFlag(config: BpfMap, on: boolean): void {
  const v = config.lookup(configKey) ?? Buffer.alloc(MAPS.config.value.size);
  const flags = v.readUInt32LE(CONFIG_FLAGS_AT);
  v.writeUInt32LE(on ? flags | CFG_FLAG.MIGRATING : flags & ~CFG_FLAG.MIGRATING, CONFIG_FLAGS_AT);
  config.update(configKey, v);
}

export class Migration {
  readonly reasons: MigrationReasonLine[];
  private readonly old = new Map<string, OldMap>();
  private readonly startedAt = performance.now();
  private stateCopied: Record<string, CopyResult> | undefined;
  private promoted = false;

  constructor(
    private readonly bpffsDir: string,
    private readonly plan: readonly MapMigration[],
    private readonly log: Logger,
  ) {
    this.reasons = plan.filter((m) => m.reason).map((m) => ({ map: m.name, reason: m.reason!, detail: m.detail ?? '' }));
    try {
      for (const m of plan) {
        if (!m.source) continue;
        const spec = MAP_BY_NAME.get(m.name)!;
        const pin = path.join(pinDirPath(bpffsDir, m.source.dir), m.source.file);
        this.old.set(m.name, { spec, map: BpfMap.openPinned(pin), version: m.source.version, pin });
      }
    } catch (err) {
      this.close();
      throw err;
    }
  }

  /** Where the new set's map `name` is pinned until finish() moves it into maps/. */
  stagedPin(name: string): string {
    return path.join(mapStagingDir(this.bpffsDir), mapPinName(name, MAP_BY_NAME.get(name)!.version));
  }

  /** The old state maps, as the *_prev maps of the objects that read through to them (BpfObject reuseMaps). */
  prevMaps(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [name, prev] of Object.entries(PREV_MAPS)) {
      const o = this.old.get(name);
      if (o) out[prev] = o.map.fd;
    }
    return out;
  }

  /** Step 1: the maps the agent owns (migrate: plan), from the old set into `maps` (new ones only: a staged map reused from an interrupted migration is the newer). */
  copyOwnedMaps(maps: ReadonlyMap<string, BpfMap>): Record<string, CopyResult> {
    const fresh = new Set(this.plan.filter((m) => !m.reuseStaged).map((m) => m.name));
    return this.copy(maps, (spec) => spec.migrate === 'plan' && fresh.has(spec.name), 'all');
  }

  /**
   * Step 4, once the socket and tc programs run on the new set. `swapPrograms`
   * loads the programs again without the old maps and swaps them in (the
   * loader's). Safe to call again after a failure: each step is done once.
   */
  finish(maps: ReadonlyMap<string, BpfMap>, config: BpfMap, swapPrograms: () => void): MigrationSummary {
    this.stateCopied ??= this.copy(maps, (spec) => spec.migrate === 'state', 'missing');
    setMigratingFlag(config, false);
    if (!this.promoted) {
      this.promote();
      this.promoted = true;
    }
    swapPrograms();
    this.close();
    return { copied: this.stateCopied, ms: performance.now() - this.startedAt };
  }

  private copy(maps: ReadonlyMap<string, BpfMap>, which: (spec: MapSpec) => boolean, mode: CopyMode): Record<string, CopyResult> {
    const out: Record<string, CopyResult> = {};
    for (const [name, o] of this.old) {
      if (!which(o.spec)) continue;
      const target = maps.get(name);
      if (!target) continue;
      const from = layoutsAt(o.spec, o.version)!;
      const r = copyMapEntries(o.map, from, target, { key: o.spec.key, value: o.spec.value }, mode);
      out[name] = r;
      if (r.dropped > 0) {
        this.log.warn('map migration: entries did not fit the new map', { map: name, entries: r.entries, dropped: r.dropped, maxEntries: target.maxEntries });
      }
    }
    return out;
  }

  /** The staged pins into maps/ (rename over a pin of the same name is atomic), then the old pins of other names, then staging/. */
  private promote(): void {
    const staging = mapStagingDir(this.bpffsDir);
    const live = mapPinDir(this.bpffsDir);
    const placed = new Set<string>();
    for (const m of this.plan) {
      const file = mapPinName(m.name, MAP_BY_NAME.get(m.name)!.version);
      const to = path.join(live, file);
      if (fs.existsSync(path.join(staging, file))) fs.renameSync(path.join(staging, file), to);
      placed.add(to);
    }
    for (const o of this.old.values()) if (!placed.has(o.pin)) fs.rmSync(o.pin, { force: true });
    try {
      fs.rmdirSync(staging);
    } catch {
      /* another file in it: left for the next start to judge */
    }
  }

  /** Releases the old maps (the programs that read through to them are gone by now, or go with the agent). */
  close(): void {
    for (const o of this.old.values()) o.map.close();
    this.old.clear();
  }
}
