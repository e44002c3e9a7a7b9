/**
 * `kpr cleanup`: removes everything kpr put on a node. Each kind of state has
 * one step function, planned first and applied in order:
 *
 *  1. pinned links under <bpffs>/links: detached (the programs leave the
 *     cgroup) and unpinned;
 *     Programs attached through links of any kind (cgroup, tcx under
 *     links/tc/) are covered by this step;
 *  2. tc filters installed without a link (clsact + cls_bpf, the tc attach
 *     mode for kernels before 6.6): kpr's filter (its own handle/priority)
 *     on every interface of the node's network namespace that has one,
 *     nothing else. The clsact qdisc stays: kpr cannot tell whether it made
 *     it or whether anything else uses it, and an empty clsact qdisc costs
 *     nothing;
 *  3. kpr's SNAT port range (61000-65535) taken out of the node's
 *     net.ipv4.ip_local_reserved_ports, in the node's network namespace,
 *     when the pinned kpr_config says the agent added it (a range someone
 *     else reserved stays, and so does every other reserved port);
 *  4. every other pin under <bpffs> (maps, anything a later version pins):
 *     unlinked, then the directories, deepest first, and <bpffs> itself.
 *
 * The agent must not be running (it would re-create its pins). Idempotent: a
 * second run finds nothing.
 */
import { existsSync, lstatSync, readdirSync, rmdirSync, unlinkSync } from 'node:fs';
import path from 'node:path';
import { BpfMap, detachPinnedLink, isBpffs, KPR_TC_FILTER, listInterfaces, withNetns } from '../../native/index.js';
import { classicMode } from '../datapath/tc-hooks.js';
import { linkPinDir, mapPinDir, mapPinPath, mapStagingDir } from '../datapath/pins.js';
import { CFG_FLAG, MAP_NAMES, mapCodecs } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import { applySnatPortsRelease, planSnatPortsRelease, SNAT_RANGE } from '../snat-ports/proc-sys.js';
import { covers, parsePortList } from '../snat-ports/port-list.js';
import type { CleanupItem, CleanupStep } from './types.js';

/** Every file and directory below `dir` (files first per directory, then the directory), deepest first. */
function walk(dir: string): { files: string[]; dirs: string[] } {
  const files: string[] = [];
  const dirs: string[] = [];
  const visit = (d: string) => {
    for (const e of readdirSync(d)) {
      const p = path.join(d, e);
      if (lstatSync(p).isDirectory()) visit(p);
      else files.push(p);
    }
    dirs.push(d);
  };
  if (existsSync(dir)) visit(dir);
  return { files, dirs };
}

function linksStep(bpffsDir: string): CleanupStep {
  const links = walk(linkPinDir(bpffsDir)).files;
  return {
    name: 'bpf links',
    items: links.map((p) => ({ kind: 'bpf-link', what: p })),
    apply: () => {
      for (const p of links) {
        try {
          detachPinnedLink(p);
        } catch (err) {
          // Not a link after all (or already defunct): still remove the pin.
          if (existsSync(p)) unlinkSync(p);
          if (!/not a bpf link/.test((err as Error).message)) throw err;
        }
      }
    },
  };
}

/**
 * kpr's clsact filters (tc attach mode "tc"): found by kpr's handle/priority
 * on the interfaces of the node's network namespace, removed one by one.
 */
function tcFiltersStep(netns: string | undefined): CleanupStep {
  const inNodeNetns = <T>(fn: () => T): T => (netns ? withNetns(netns, fn) : fn());
  const hooks = classicMode();
  const filters = inNodeNetns(() => hooks.list(listInterfaces()));
  const id = `handle 0x${KPR_TC_FILTER.handle.toString(16)} pref ${KPR_TC_FILTER.priority}`;
  return {
    name: 'tc filters',
    items: filters.map((f) => ({ kind: 'tc-filter', what: `${f.ifname} ingress ${id} (program id ${f.progId}; the clsact qdisc stays)` })),
    apply: () =>
      inNodeNetns(() => {
        for (const f of filters) hooks.remove(f);
      }),
  };
}

/** Whether the pinned kpr_config says the agent reserved the SNAT port range (false when there is no such pin). */
function snatPortsOwned(bpffsDir: string): boolean {
  const pin = mapPinPath(bpffsDir, MAP_NAMES.config);
  if (!existsSync(pin)) return false;
  const m = BpfMap.openPinned(pin);
  try {
    const v = m.lookup(mapCodecs(MAPS.config).key.encode(0));
    return v !== null && (v.readUInt32LE(MAPS.config.value.at.flags) & CFG_FLAG.SNAT_PORTS_RESERVED) !== 0;
  } finally {
    m.close();
  }
}

function snatPortsStep(bpffsDir: string, netns: string | undefined): CleanupStep {
  const name = 'SNAT port reservation';
  const owned = snatPortsOwned(bpffsDir);
  const plan = planSnatPortsRelease({ netns, owned });
  if (plan.error) return { name, items: [], error: `cannot read the node's reserved ports: ${plan.error}`, apply: () => undefined };
  const text = plan.text;
  const range = `${SNAT_RANGE.lo}-${SNAT_RANGE.hi}`;
  const reservedByOthers = !owned && plan.before !== undefined && covers(parsePortList(plan.before), SNAT_RANGE);
  return {
    name,
    items:
      text === undefined
        ? []
        : [{ kind: 'sysctl', what: `net.ipv4.ip_local_reserved_ports: "${plan.before}" becomes "${text}" (kpr's SNAT range ${range} released)` }],
    ...(reservedByOthers
      ? {
          kept: [
            {
              kind: 'sysctl',
              what: `net.ipv4.ip_local_reserved_ports ${range}`,
              reason: "reserved before kpr started (or by the chart's init container): not kpr's to release",
            },
          ],
        }
      : {}),
    apply: () => {
      if (text === undefined) return;
      const error = applySnatPortsRelease(text, { netns });
      if (error) throw new Error(error);
    },
  };
}

function pinsStep(bpffsDir: string): CleanupStep {
  const { files, dirs } = walk(bpffsDir);
  const links = new Set(walk(linkPinDir(bpffsDir)).files);
  const pins = files.filter((f) => !links.has(f));
  const items: CleanupItem[] = [
    ...pins.map((p) => ({ kind: [mapPinDir(bpffsDir), mapStagingDir(bpffsDir)].some((d) => p.startsWith(d + path.sep)) ? 'bpf-map' : 'bpf-pin', what: p })),
    ...dirs.map((d) => ({ kind: 'directory', what: d })),
  ];
  return {
    name: 'bpffs pins',
    items,
    apply: () => {
      for (const p of pins) if (existsSync(p)) unlinkSync(p);
      for (const d of dirs) if (existsSync(d)) rmdirSync(d);
    },
  };
}

/**
 * Refuses anything but a directory inside a bpf filesystem (never its mount
 * root, which holds other programs' pins too): this walks and unlinks.
 */
export function checkBpffsDir(bpffsDir: string): string {
  const abs = path.resolve(bpffsDir);
  if (!existsSync(abs)) return abs;
  if (!lstatSync(abs).isDirectory()) throw new Error(`${abs} is not a directory`);
  if (!isBpffs(abs)) throw new Error(`${abs} is not on a bpf filesystem; refusing to remove anything there`);
  if (abs === path.dirname(abs) || !isBpffs(path.dirname(abs))) {
    throw new Error(`${abs} is the root of a bpf filesystem, which holds other programs' pins too; pass kpr's own directory (e.g. /sys/fs/bpf/kpr)`);
  }
  return abs;
}

export function kprCleanupSteps(bpffsDir: string, opts: { netns?: string } = {}): CleanupStep[] {
  bpffsDir = checkBpffsDir(bpffsDir);
  return [linksStep(bpffsDir), tcFiltersStep(opts.netns), snatPortsStep(bpffsDir, opts.netns), pinsStep(bpffsDir)];
}
