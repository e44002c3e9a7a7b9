/**
 * Reads what migration-plan.ts plans from: the map pins under maps/ and
 * staging/ (name, layout version, what the kernel says of each), and the
 * maps the socket programs attached through kpr's pinned cgroup links use.
 */
import fs from 'node:fs';
import path from 'node:path';
import { BpfMap, pinnedLinkInfo, programMapIds } from '../../native/index.js';
import type { FoundPin, PinDir } from './migration-plan.js';
import { linkPinPath, mapPinDir, mapStagingDir, parseMapPinName } from './pins.js';

export function pinDirPath(bpffsDir: string, dir: PinDir): string {
  return dir === 'maps' ? mapPinDir(bpffsDir) : mapStagingDir(bpffsDir);
}

/** Every pin under maps/ and staging/ whose name is a map pin name (other files are not kpr's to judge). */
export function scanMapPins(bpffsDir: string): FoundPin[] {
  const out: FoundPin[] = [];
  for (const dir of ['maps', 'staging'] as const) {
    const at = pinDirPath(bpffsDir, dir);
    if (!fs.existsSync(at)) continue;
    for (const file of fs.readdirSync(at).sort()) {
      const parsed = parseMapPinName(file);
      if (!parsed) continue;
      const pin: FoundPin = { file, dir, ...parsed, info: null };
      try {
        const m = BpfMap.openPinned(path.join(at, file));
        try {
          pin.info = { id: m.id, type: m.type, keySize: m.keySize, valueSize: m.valueSize, maxEntries: m.maxEntries, flags: m.flags };
        } finally {
          m.close();
        }
      } catch (err) {
        pin.error = (err as Error).message;
      }
      out.push(pin);
    }
  }
  return out;
}

/**
 * Ids of the maps the programs in kpr's cgroup links use now (the previous
 * agent's, still attached). A link that is gone or unreadable adds nothing.
 */
export function liveMapIds(bpffsDir: string, programs: readonly string[]): Set<number> {
  const ids = new Set<number>();
  for (const prog of programs) {
    try {
      const link = pinnedLinkInfo(linkPinPath(bpffsDir, prog));
      if (!link) continue;
      for (const id of programMapIds(link.progId) ?? []) ids.add(id);
    } catch {
      /* not a link, or gone: says nothing about which maps are live */
    }
  }
  return ids;
}
