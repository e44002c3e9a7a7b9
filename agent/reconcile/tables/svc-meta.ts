/**
 * kpr_svc_meta, frontendId → the frontend's names (read by the CLI only):
 * written at step 4 (names of new frontendIds, before a master carries them),
 * deleted at step 10 (names of released frontendIds). Its text fields are
 * fixed-size: metaOf cuts the names as the map stores them. Its part of
 * the mirror is a SvcMetaMirror (frontendId → names).
 */
import type { RawDump } from '../../maps/datapath-maps.js';
import { packId } from '../../maps/fast-pack.js';
import { MAP_NAMES, encodeSvcMeta, type SvcMeta } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import type { Writes } from '../write-batch.js';
import { compareKeyValues, hashFromMap, noDrift, phase, touchU32, type ByFrontendId, type DriftSink, type ReconcilerTable } from './table.js';

const MAP = MAP_NAMES.svcMeta;
const KEY_SIZE = MAPS.svcMeta.key.size;
const META = MAPS.svcMeta.value;
const VAL_SIZE = META.size;
const rec = Buffer.alloc(KEY_SIZE + VAL_SIZE);

/** A record (frontendId → names), in a reused buffer. */
export function svcMetaRecord(frontendId: number, meta: SvcMeta): Buffer {
  packId(frontendId, rec, 0);
  encodeSvcMeta(meta, rec, KEY_SIZE);
  return rec;
}

/**
 * The name field holds 127 bytes of text, the port name 63: Kubernetes'
 * longest "namespace/name" and port name whole, so cutting never happens
 * to a name the API server accepted.
 */
const NAME_MAX = META.sizes.name - 1;
const PORT_NAME_MAX = META.sizes.port_name - 1;

/** Text as the map stores it (cut to the field), so a dump compares equal to what was written. */
function cut(text: string, max: number): string {
  // A UTF-16 unit is at most 3 bytes of UTF-8, so a short text fits without measuring.
  if (text.length * 3 <= max) return text;
  return text.length <= max && Buffer.byteLength(text) <= max
    ? text
    : Buffer.from(text)
        .subarray(0, max)
        .toString('utf8')
        .replace(/\uFFFD+$/, '');
}

/** A frontend's names as the map stores them. */
export function metaOf(service: string, portName: string, type: number, proto: number): SvcMeta {
  return { name: cut(service, NAME_MAX), portName: cut(portName, PORT_NAME_MAX), type, proto };
}

/**
 * A batch as the decoded compare sees it: the bytes after each name's NUL
 * and the pad zeroed, as encodeSvcMeta writes them (an entry written by
 * another encoder is then no raw difference the decode would not see).
 */
function normalise(d: RawDump): void {
  const v = d.values;
  for (let r = 0; r < d.count; r++) {
    const o = r * d.valueStride;
    zeroAfterNul(v, o + META.at.name, META.sizes.name);
    zeroAfterNul(v, o + META.at.port_name, META.sizes.port_name);
    v.fill(0, o + META.at.pad, o + META.size);
  }
}

function zeroAfterNul(b: Buffer, off: number, size: number): void {
  const end = off + size;
  for (let i = off; i < end; i++) {
    if (b[i] === 0) {
      b.fill(0, i, end);
      return;
    }
  }
}

export function sameMeta(a: SvcMeta | undefined, b: SvcMeta): boolean {
  return a !== undefined && a.name === b.name && a.portName === b.portName && a.type === b.type && a.proto === b.proto;
}

/** What the kernel's map holds, as last written or read: frontendId → the frontend's names. */
export class SvcMetaMirror implements ByFrontendId {
  readonly byFrontendId = new Map<number, SvcMeta>();

  clear(): void {
    this.byFrontendId.clear();
  }

  /**
   * Adds what a dump of the map holds; a frontendId no frontend owns
   * (`owners`) is noted in `suspects`. Returns the entries of such frontendIds.
   */
  load(metas: ReadonlyArray<[number, SvcMeta]>, owners: ReadonlyMap<number, string>, suspects: Set<number>): number {
    let orphans = 0;
    for (const [fid, m] of metas) {
      this.byFrontendId.set(fid, m);
      if (!owners.has(fid)) {
        orphans++;
        suspects.add(fid);
      }
    }
    return orphans;
  }

  frontendIds(): IterableIterator<number> {
    return this.byFrontendId.keys();
  }
}

/** The part of the mirror this table reads. */
interface Mirror {
  readonly svcMeta: SvcMetaMirror;
}

/** The diff: makes the names of `frontendId` `meta` in the mirror, queueing the write when they differ. */
export function diffSvcMeta(m: Mirror, frontendId: number, meta: SvcMeta, w: Writes): void {
  const names = m.svcMeta.byFrontendId;
  if (sameMeta(names.get(frontendId), meta)) return;
  w.metaWrites.push([frontendId, meta]);
  names.set(frontendId, meta);
}

/** Drops the names of `frontendId` from the mirror, queueing their delete (nothing when it has none). */
export function dropSvcMeta(m: Mirror, frontendId: number, w: Writes): void {
  if (m.svcMeta.byFrontendId.delete(frontendId)) w.metaDeletes.push(frontendId);
}

const compare = (mirror: Mirror, kernel: Iterable<[number, SvcMeta]>, add: DriftSink) =>
  compareKeyValues(MAP, mirror.svcMeta.byFrontendId, kernel, sameMeta, add);

export const svcMetaTable: ReconcilerTable<Mirror> = {
  map: MAP,
  phases: [
    phase(
      4,
      MAP,
      'write',
      'auxWritten',
      (w) => w.metaWrites,
      (t, q) => t.maps.updateSvcMeta(q),
      touchU32,
    ),
    phase(
      10,
      MAP,
      'delete',
      'auxDeleted',
      (w) => w.metaDeletes,
      (t, q) => t.maps.deleteSvcMeta(q),
      touchU32,
    ),
  ],
  sliced: {
    keySize: KEY_SIZE,
    valSize: VAL_SIZE,
    cursor: (m, b) => m.svcMetaRawCursor(b),
    normalise,
    hashMirror: hashFromMap((m: Mirror) => m.svcMeta.byFrontendId, KEY_SIZE, VAL_SIZE, svcMetaRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compare(mirror, maps.dumpSvcMeta(), add)),
  compare: (mirror, k, add) => compare(mirror, k.metas, add),
};
