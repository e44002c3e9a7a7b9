/**
 * kpr_tc.bpf.o loaded for BPF_PROG_TEST_RUN tests, its maps pinned in a
 * bpffs directory of the run's own, and the frontends those tests write.
 */
import path from 'node:path';
import { rmSync } from 'node:fs';
import { BpfObject, ensureBpffs, type BpfMap } from '../../native/index.js';
import { SCOPE, encodeBackend, encodeBackendId, encodeSvcKey, encodeSvcVal } from '../../agent/maps/layout.js';
import { newRunId } from '../../sandbox/netns.js';
import { repoRoot } from './paths.js';
import { requireRoot } from './preflight.js';

export interface TcObject {
  obj: BpfObject;
  svc: BpfMap;
  backend: BpfMap;
  /** Closes the object and removes its pins. */
  close(): void;
}

/** `maxEntries`: map sizes by name set at load, as the agent sets them (agent/datapath/map-sizes.ts). */
export function loadTcObject(runPrefix: string, maxEntries: Readonly<Record<string, number>> = {}): TcObject {
  requireRoot();
  const dir = ensureBpffs(path.join('/sys/fs/bpf', newRunId(runPrefix)));
  let obj: BpfObject | undefined;
  try {
    obj = BpfObject.open(path.join(repoRoot, 'build', 'kpr_tc.bpf.o'), { pinMapsDir: dir, maxEntries });
    obj.load();
  } catch (err) {
    // A missing or rejected object must not leave the run's pin directory behind.
    obj?.close();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    obj,
    svc: obj.map('kpr_svc'),
    backend: obj.map('kpr_backend'),
    close: () => {
      obj!.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A frontend's entry set: its backends (id, address, port), their slots, then the master entry. */
export function writeFrontend(
  t: Pick<TcObject, 'svc' | 'backend'>,
  fe: { addr: string; port: number; proto: number; frontendId: number; flags: number; scope?: number },
  backends: Array<[number, string, number]>,
): void {
  const { addr, port, proto, frontendId, flags, scope = SCOPE.EXTERNAL } = fe;
  backends.forEach(([id, a, p], i) => {
    t.backend.update(encodeBackendId(id), encodeBackend({ addr: a, port: p, proto, flags: 0 }));
    t.svc.update(encodeSvcKey({ addr, port, slot: i + 1, proto, scope }), encodeSvcVal({ backendId: id, count: 0, frontendId: 0, flags: 0 }));
  });
  t.svc.update(encodeSvcKey({ addr, port, slot: 0, proto, scope }), encodeSvcVal({ backendId: 0, count: backends.length, frontendId, flags }));
}
