/**
 * The conntrack sweep's cost (agent/datapath/ct-sweeper.ts, every
 * --ct-sweep-interval): a real kpr_ct-shaped LRU hash map filled with N
 * flows, half of them expired, swept as the agent sweeps it (batch reads of
 * 4,096 entries; each expired key looked up again and deleted if still
 * expired, in C through the native library), and the same with a koffi call
 * per syscall (no native library) and as one read of the whole map. Prints a
 * table and JSON: the sweep's wall time per size and per 100,000 entries.
 *
 *   make build && node dist/bench/ct-sweep.js [--sizes 100000,262144,1000000] [--runs 3]
 */
import { parseArgs } from 'node:util';
import { BPF_MAP_TYPE, BpfMap } from '../native/index.js';
import path from 'node:path';
import { deleteStillExpiredHere, nativeStillExpiredDeleter, sweepExpiredConntrack, sweepExpiredConntrackSliced } from '../agent/datapath/ct-sweeper.js';
import { BATCH_WRITER_LIBRARY, BatchWriter } from '../native/index.js';
import { repoRoot } from '../sandbox/repo.js';
import { CT_DIR, IPPROTO, mapCodecs } from '../agent/maps/layout.js';
import { MAPS } from '../agent/maps/registry.js';

const { values } = parseArgs({ options: { sizes: { type: 'string', default: '100000,262144,1000000' }, runs: { type: 'string', default: '3' } } });
const sizes = values.sizes!.split(',').map(Number);
const runs = Number(values.runs);
const ct = mapCodecs(MAPS.ct);

/** `n` flows from distinct client ports and addresses; every second one expired at `now`. */
function fill(map: BpfMap, n: number, now: bigint): void {
  const chunk = 8192;
  for (let start = 0; start < n; start += chunk) {
    const c = Math.min(chunk, n - start);
    const keys = Buffer.alloc(c * ct.key.size);
    const vals = Buffer.alloc(c * ct.value.size);
    for (let i = 0; i < c; i++) {
      const f = start + i;
      const client = `198.18.${(f >> 16) & 0xff}.${(f >> 8) & 0xff}`;
      ct.key.encode(
        { saddr: client, daddr: '198.19.0.10', sport: 1024 + (f & 0xff) * 200 + ((f >> 24) & 0xff), dport: 80, proto: IPPROTO.TCP, dir: CT_DIR.ORIGINAL },
        keys,
        i * ct.key.size,
      );
      ct.value.encode(
        {
          natSaddr: client,
          natDaddr: '198.18.10.10',
          natSport: 40000,
          natDport: 8080,
          backendId: 1,
          expiresNs: f % 2 === 0 ? now - 1n : now + 3_600_000_000_000n,
          frontendId: 1,
          flags: 0,
        },
        vals,
        i * ct.value.size,
      );
    }
    map.updateBatch(keys, vals, c);
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const r1 = (x: number) => Math.round(x * 10) / 10;
interface Row {
  entries: number;
  expired: number;
  /** The whole map at once (the event loop blocked for all of it). */
  wholeMs: number;
  /** Sliced, as the agent sweeps: total time, and the longest slice (the longest block). */
  slicedMs: number;
  longestSliceMs: number;
  slices: number;
  slicedMsPer100k: number;
  /** Sliced, each key's lookup and delete a koffi call (the agent without its native library). */
  slicedKoffiMs: number;
}
const rows: Row[] = [];
const writer = BatchWriter.open(path.join(repoRoot, 'build', BATCH_WRITER_LIBRARY));
const native = nativeStillExpiredDeleter(writer);

async function main(): Promise<void> {
  for (const n of sizes) {
    const whole: number[] = [];
    const sliced: number[] = [];
    const longest: number[] = [];
    const slicedKoffi: number[] = [];
    let removed = 0;
    let slices = 0;
    for (let r = 0; r < runs; r++) {
      for (const mode of ['whole', 'sliced', 'slicedKoffi'] as const) {
        // Room for every flow: an LRU map at capacity would evict instead of holding them all.
        const map = BpfMap.create(BPF_MAP_TYPE.LRU_HASH, ct.key.size, ct.value.size, Math.ceil(n * 1.3), 'kpr_ct_bench');
        try {
          const now = process.hrtime.bigint();
          fill(map, n, now);
          const t0 = performance.now();
          if (mode === 'whole') {
            removed = sweepExpiredConntrack(map, now, native);
            whole.push(performance.now() - t0);
          } else if (mode === 'slicedKoffi') {
            const s = await sweepExpiredConntrackSliced(map, now, undefined, deleteStillExpiredHere);
            slicedKoffi.push(performance.now() - t0);
            if (s.removed !== removed) throw new Error(`sliced sweep (koffi) removed ${s.removed}, whole ${removed}`);
          } else {
            const s = await sweepExpiredConntrackSliced(map, now, undefined, native);
            sliced.push(performance.now() - t0);
            longest.push(s.longestSliceMs);
            slices = s.slices;
            if (s.removed !== removed) throw new Error(`sliced sweep removed ${s.removed}, whole ${removed}`);
          }
        } finally {
          map.close();
        }
      }
    }
    rows.push({
      entries: n,
      expired: removed,
      wholeMs: r1(median(whole)),
      slicedMs: r1(median(sliced)),
      longestSliceMs: r1(median(longest)),
      slices,
      slicedMsPer100k: r1((median(sliced) / n) * 100_000),
      slicedKoffiMs: r1(median(slicedKoffi)),
    });
  }
  console.log(`conntrack sweep (agent/datapath/ct-sweeper.ts), half of the flows expired; median of ${runs} runs, each mode on a fresh map`);
  console.log(
    '| entries | expired removed | whole map at once (the event loop blocked throughout) | sliced as the agent sweeps: total | per 100,000 entries | longest slice (longest block) | slices | sliced, a koffi call per syscall |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const r of rows)
    console.log(
      `| ${r.entries.toLocaleString('en-US')} | ${r.expired.toLocaleString('en-US')} | ${r.wholeMs} ms | ${r.slicedMs} ms | ${r.slicedMsPer100k} ms | ${r.longestSliceMs} ms | ${r.slices} | ${r.slicedKoffiMs} ms |`,
    );
  console.log(JSON.stringify({ runs, rows }, null, 2));
  writer.close();
}
main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
