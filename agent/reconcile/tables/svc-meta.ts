/**
 * kpr_svc_meta, frontendId → the frontend's names (read by the CLI only):
 * written at step 4 (names of new frontendIds, before a master carries them),
 * deleted at step 10 (names of released frontendIds). Its text fields are
 * fixed-size: metaOf cuts the names as the map stores them.
 */
import type { RawDump } from '../../maps/datapath-maps.js';
import { packId } from '../../maps/fast-pack.js';
import { MAP_NAMES, encodeSvcMeta, type SvcMeta } from '../../maps/layout.js';
import { MAPS } from '../../maps/registry.js';
import { sameMeta, type KernelMirror } from '../kernel-mirror.js';
import { compareKeyValues, hashFromMap, noDrift, phase, touchU32, type DriftSink, type ReconcilerTable } from './table.js';

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

const compare = (mirror: KernelMirror, kernel: Iterable<[number, SvcMeta]>, add: DriftSink) => compareKeyValues(MAP, mirror.svcMeta, kernel, sameMeta, add);

export const svcMetaTable: ReconcilerTable = {
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
    hashMirror: hashFromMap((m) => m.svcMeta, KEY_SIZE, VAL_SIZE, svcMetaRecord),
  },
  matches: (maps, mirror) => noDrift((add) => compare(mirror, maps.dumpSvcMeta(), add)),
  compare: (mirror, k, add) => compare(mirror, k.metas, add),
};
