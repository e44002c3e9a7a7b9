/**
 * The conntrack stress run: many NodePort flows through the real tc programs
 * (BPF_PROG_TEST_RUN), one worker thread pinned to each CPU, with port reuse
 * and the agent's sweeper deleting expired entries meanwhile; then every live
 * flow's two kpr_ct entries are looked up. A flow with one entry and not the
 * other is a half-flow: its client's packets still reach the backend, whose
 * answers miss conntrack and are reset (docs/architecture.md, tc path,
 * conntrack).
 *
 * The fill is of the conntrack capacity asked for (`capacity`, what
 * --map-size-conntrack says); `maxEntries` is the kpr_ct size the object is
 * loaded with (the agent's: computeMapSizes).
 */
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { BATCH_WRITER_LIBRARY, BatchWriter, sumPerCpuU64, type BpfMap } from '../../native/index.js';
import { CT_DIR, CT_KEY, IPPROTO, STAT, SVC_FLAG, codecOf, decodeCtVal, encodeConfig } from '../../agent/maps/layout.js';
import { nativeStillExpiredDeleter, sweepExpiredConntrackSliced } from '../../agent/datapath/ct-sweeper.js';
import { repoRoot } from './paths.js';
import { loadTcObject, writeFrontend } from './tc-object.js';
import type { StressJob, StressReport } from './ct-stress-worker.js';

const NODE = '198.18.1.1';
const NODE_PORT = 30080;
const BACKENDS: Array<[number, string, number]> = [
  [1, '198.18.20.10', 8080],
  [2, '198.18.20.11', 8080],
  [3, '198.18.20.12', 8080],
  [4, '198.18.20.13', 8080],
];
/** Client ports of flows opened and closed again, per CPU: their expired entries are what the sweeper deletes. */
const POOL = 8;
const encodeCtKey = codecOf(CT_KEY).encode;

export interface FillResult {
  fill: number;
  capacity: number;
  maxEntries: number;
  cpus: number;
  flows: number;
  /** One entry of the two. */
  halfFlows: number;
  /** Neither entry. */
  lostFlows: number;
  /** Backend answers not reverse-NATed (each a reset at the client). */
  repliesMissed: number;
  notTranslated: number;
  /** Client packets past the SYN that found no entry (KPR_STAT_TC_CT_LOST): balanced afresh, maybe to another backend. */
  ctLost: number;
  replyRestored: number;
  swept: number;
  packets: number;
  ms: number;
  /** The first few flows that lost an entry: which one is left, and what it holds. */
  examples: string[];
}

function stat(stats: BpfMap, idx: number): bigint {
  const key = Buffer.alloc(4);
  key.writeUInt32LE(idx);
  const v = stats.lookup(key);
  return v ? sumPerCpuU64(v, stats.valueStride / stats.possibleCpus(), 0) : 0n;
}

function runWorker(job: StressJob): Promise<StressReport> {
  const file = path.join(path.dirname(fileURLToPath(import.meta.url)), 'ct-stress-worker.js');
  return new Promise((resolve, reject) => {
    const w = new Worker(file, { workerData: job });
    w.once('message', resolve);
    w.once('error', reject);
    w.once('exit', (code) => code !== 0 && reject(new Error(`stress worker on CPU ${job.cpu} exited ${code}`)));
  });
}

/** One fill level on a freshly loaded object (a fresh LRU: no state carried from the level before). */
export async function runFill(opts: {
  nsPath: string;
  capacity: number;
  maxEntries: number;
  fill: number;
  cpus: number[];
  sweep?: boolean;
}): Promise<FillResult> {
  const t0 = performance.now();
  const tc = loadTcObject('kpr-ct-stress', { kpr_ct: opts.maxEntries });
  try {
    const { obj } = tc;
    const ct = obj.map('kpr_ct');
    // A closed flow's entries expire at once (closing timeout 0): the sweeper has work all along.
    obj
      .map('kpr_config')
      .update(
        Buffer.alloc(4),
        encodeConfig({ hostNetnsCookie: 0n, snatV4: NODE, snatV6: '2001:db8:1::1', tcpTimeoutS: 300, tcpClosingTimeoutS: 0, udpTimeoutS: 30, flags: 0 }),
      );
    writeFrontend(tc, { addr: NODE, port: NODE_PORT, proto: IPPROTO.TCP, frontendId: 7, flags: SVC_FLAG.NODE_PORT }, BACKENDS);
    const ncpu = opts.cpus.length;
    // Entries at most: two per live flow and per pool flow.
    const total = Math.max(ncpu, Math.floor((opts.fill * opts.capacity) / 2) - POOL * ncpu);
    const jobs = opts.cpus.map((cpu, w): StressJob => {
      const flows = Math.floor(total / ncpu) + (w < total % ncpu ? 1 : 0);
      return {
        cpu,
        ext: obj.program('kpr_tc_ext').fd,
        pod: obj.program('kpr_tc_pod').fd,
        nsPath: opts.nsPath,
        node: NODE,
        nodePort: NODE_PORT,
        client: `198.18.100.${10 + w}`,
        firstPort: 10000,
        flows,
        poolPort: 50000,
        pool: POOL,
        churn: flows,
      };
    });
    let sweeping = opts.sweep ?? true;
    let swept = 0;
    // The agent's sweep: its native deleter (the batch writer's library, built by make build).
    const writer = BatchWriter.open(path.join(repoRoot, 'build', BATCH_WRITER_LIBRARY));
    const deleter = nativeStillExpiredDeleter(writer);
    const sweeper = (async () => {
      try {
        while (sweeping) swept += (await sweepExpiredConntrackSliced(ct, process.hrtime.bigint(), undefined, deleter)).removed;
      } finally {
        writer.close();
      }
    })();
    let reports: StressReport[];
    try {
      reports = await Promise.all(jobs.map(runWorker));
    } finally {
      sweeping = false;
      await sweeper;
    }
    const res: FillResult = {
      fill: opts.fill,
      capacity: opts.capacity,
      maxEntries: ct.maxEntries,
      cpus: ncpu,
      flows: 0,
      halfFlows: 0,
      lostFlows: 0,
      repliesMissed: 0,
      notTranslated: 0,
      ctLost: Number(stat(obj.map('kpr_stats'), STAT.TC_CT_LOST)),
      replyRestored: Number(stat(obj.map('kpr_stats'), STAT.TC_CT_REPLY_RESTORED)),
      swept,
      packets: 0,
      ms: 0,
      examples: [],
    };
    for (const [w, rep] of reports.entries()) {
      const client = jobs[w]!.client;
      res.repliesMissed += rep.repliesMissed;
      res.notTranslated += rep.notTranslated;
      res.packets += rep.packets;
      for (const f of rep.flows) {
        res.flows++;
        const orig = ct.lookup(encodeCtKey({ saddr: client, daddr: NODE, sport: f.port, dport: NODE_PORT, proto: IPPROTO.TCP, dir: CT_DIR.ORIGINAL }));
        const replyVal = ct.lookup(
          encodeCtKey({ saddr: f.backend, daddr: NODE, sport: f.backendPort, dport: f.snatPort, proto: IPPROTO.TCP, dir: CT_DIR.REPLY }),
        );
        const reply = replyVal ? decodeCtVal(replyVal, 0) : null;
        // The REPLY entry on the flow's tuple counts only while it is this flow's.
        const replyOurs = reply !== null && reply.natDaddr === client && reply.natDport === f.port;
        if (orig && replyOurs) continue;
        if (orig || replyOurs) res.halfFlows++;
        else res.lostFlows++;
        if (res.examples.length < 5 && (orig || replyOurs || res.lostFlows <= 2)) {
          const o = orig ? decodeCtVal(orig, 0) : null;
          res.examples.push(
            `cpu ${rep.cpu} ${client}:${f.port} -> ${f.backend} snat ${f.snatPort}: ORIGINAL ${o ? `flags ${o.flags} to ${o.natDaddr}:${o.natDport} snat ${o.natSport}` : 'gone'}, REPLY ${reply ? `flags ${reply.flags} for ${reply.natDaddr}:${reply.natDport}` : 'gone'}`,
          );
        }
      }
    }
    res.ms = Math.round(performance.now() - t0);
    return res;
  } finally {
    tc.close();
  }
}
