/**
 * `kpr service list -o json` of this build against another build's CLI, on
 * one set of pinned maps at the bench's scale, in alternating rounds:
 *
 *   node dist/bench/service-list-ab.js --other /tmp/dist-main/kpr.mjs [--services 100000] [--endpoints 10] [--rounds 3]
 *
 * The maps are the real datapath object's, created and pinned under a fresh
 * /sys/fs/bpf/kpr-bench-list-* directory with the sizes the bench gives the
 * agent (bench/map-sizing.ts), and filled as the bench's scenario fills them
 * (a ClusterIP frontend per Service, named in kpr_svc_meta, with its
 * endpoints' backends), without an agent or an API server. Each round runs
 * both CLIs (which first alternates), stdout to a file, as
 * bench/cli-timing.ts does; the two outputs must be the same bytes.
 */
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { benchMapSizes, scenarioNeeds } from './map-sizing.js';
import { median, round } from './report.js';
import { timedRun } from './ruleset-load.js';
import { repoRoot } from '../sandbox/repo.js';
import { fillServiceMaps, pinDatapathMaps } from '../sandbox/service-maps.js';

const { values: opts } = parseArgs({
  options: {
    other: { type: 'string' },
    services: { type: 'string', default: '100000' },
    endpoints: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '3' },
    /** Pin and fill the maps only, print their directory and leave them (for profiling one CLI; rm -r it after). */
    'maps-only': { type: 'boolean', default: false },
  },
});
if (!opts.other && !opts['maps-only']) throw new Error('usage: service-list-ab.js --other PATH/kpr.mjs [--services N] [--endpoints M] [--rounds R]');
const services = Number(opts.services);
const endpoints = Number(opts.endpoints);
const rounds = Number(opts.rounds);

/** Service i: 198.18.0.0/15 + i, port 80/TCP, id i + 1; its endpoints' backends 198.19.128.0/17 onwards, ids from 1. */
const svcAddr = (i: number) => `198.${18 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
const backendAddr = (n: number) => `${10 + (n >> 24)}.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;

function pinMaps(dir: string): void {
  const sizes = benchMapSizes(scenarioNeeds(services, endpoints));
  pinDatapathMaps(dir, {
    kpr_svc: sizes.services,
    kpr_backend: sizes.backends,
    kpr_aff_match: sizes.backends,
    kpr_svc_meta: sizes.frontends,
    kpr_svc_stats: sizes.frontends,
    kpr_vip: sizes.frontends,
  });
  fillServiceMaps(dir, {
    services,
    backendsPerService: endpoints,
    svcAddr,
    backendAddr: (i, j) => backendAddr(i * endpoints + j),
    name: (i) => `bench-${i % 100}/svc-${i}`,
  });
}

async function timeCli(kprMjs: string, dir: string, outFile: string): Promise<number> {
  const fd = openSync(outFile, 'w');
  try {
    return round(await timedRun(process.execPath, [kprMjs, 'service', 'list', '--bpffs', dir, '-o', 'json'], { stdoutFd: fd, timeoutMs: 120_000 }));
  } finally {
    closeSync(fd);
  }
}

const bpffsDir = path.join('/sys/fs/bpf', `kpr-bench-list-${process.pid}-${randomBytes(4).toString('hex')}`);
const outDir = mkdtempSync(path.join(os.tmpdir(), 'kpr-bench-list-'));
const cleanup = () => {
  rmSync(bpffsDir, { recursive: true, force: true });
  rmSync(outDir, { recursive: true, force: true });
};
process.once('SIGINT', () => {
  cleanup();
  process.exit(130);
});
try {
  const t0 = performance.now();
  pinMaps(bpffsDir);
  console.log(`${services} services x ${endpoints} endpoints pinned in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  if (opts['maps-only']) {
    console.log(`maps left at ${bpffsDir} (rm -r it when done)`);
  } else await compare();
} finally {
  if (opts['maps-only']) rmSync(outDir, { recursive: true, force: true });
  else cleanup();
}

async function compare(): Promise<void> {
  const clis = { this: path.join(repoRoot, 'dist', 'kpr.mjs'), other: path.resolve(opts.other!) };
  const outs = { this: path.join(outDir, 'this.json'), other: path.join(outDir, 'other.json') };
  const ms: Record<'this' | 'other', number[]> = { this: [], other: [] };
  await timeCli(clis.this, bpffsDir, outs.this); // warms the page cache for node and both bundles
  await timeCli(clis.other, bpffsDir, outs.other);
  for (let r = 0; r < rounds; r++) {
    const order: Array<'this' | 'other'> = r % 2 === 0 ? ['other', 'this'] : ['this', 'other'];
    for (const which of order) {
      ms[which].push(await timeCli(clis[which], bpffsDir, outs[which]));
      console.log(`round ${r + 1} ${which}: ${ms[which].at(-1)} ms (load average ${os.loadavg()[0]!.toFixed(2)})`);
    }
  }
  const same = readFileSync(outs.this).equals(readFileSync(outs.other));
  const ratio = median(ms.this) / median(ms.other);
  console.log(
    `this ${ms.this.join(', ')} ms (median ${median(ms.this)}), other ${ms.other.join(', ')} ms (median ${median(ms.other)}): ${ratio.toFixed(3)}x; outputs ${same ? 'identical' : 'DIFFER'}`,
  );
  if (!same) process.exitCode = 1;
}
