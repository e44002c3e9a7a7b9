/**
 * ns per packet of kpr_tc_ext on the paths of a new flow that leave no
 * state behind, timed by the kernel (BPF_PROG_TEST_RUN, --repeat runs per
 * call), for this build's kpr_tc.bpf.o and, with --base, another build's
 * side by side (the arms alternate call by call; the figures are medians of
 * the calls' averages):
 *  - drop:    a SYN to a NodePort without endpoints (lookup, policy, drop);
 *  - select:  a SYN to a NodePort whose one slot names a backend the
 *             backend map lacks (lookup, policy, the selection dispatch and
 *             the slot's lookups; then passed untranslated, counted as
 *             KPR_STAT_BACKEND_MISSING).
 * A translated flow is not timed here: it writes conntrack entries, so a
 * repeated run would take the known-flow path after the first.
 *
 *   make build && node dist/bench/tc-paths.js [--base OTHER/build/kpr_tc.bpf.o] [--rounds 30] [--repeat 2000]
 */
import path from 'node:path';
import { rmSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { BpfObject, ensureBpffs, testRun } from '../native/index.js';
import { encodeConfig, encodeSvcKey, encodeSvcVal, IPPROTO, SCOPE, SVC_ALG, SVC_FLAG, svcAlgFlags } from '../agent/maps/layout.js';
import { newRunId } from '../sandbox/netns.js';
import { repoRoot } from '../sandbox/repo.js';
import { tcpSyn } from './tc-frames.js';

const { values } = parseArgs({ options: { base: { type: 'string' }, rounds: { type: 'string', default: '30' }, repeat: { type: 'string', default: '2000' } } });
const rounds = Number(values.rounds);
const repeat = Number(values.repeat);
const NODE = '198.18.1.1';
const PORTS = { drop: 30099, select: 30100 } as const;
type Path = keyof typeof PORTS;
const MISSING_BACKEND_ID = 77;

/** The object loaded on pins of its own, with the node's address and the two NodePorts. */
function load(file: string): { obj: BpfObject; close(): void } {
  const dir = ensureBpffs(path.join('/sys/fs/bpf', newRunId('kpr-bench-tc')));
  const obj = BpfObject.open(file, { pinMapsDir: dir });
  try {
    obj.load();
    obj
      .map('kpr_config')
      .update(
        Buffer.alloc(4),
        encodeConfig({ hostNetnsCookie: 0n, snatV4: NODE, snatV6: '', tcpTimeoutS: 300, tcpClosingTimeoutS: 10, udpTimeoutS: 30, flags: 0 }),
      );
    const svc = obj.map('kpr_svc');
    const flags = SVC_FLAG.NODE_PORT | svcAlgFlags(SVC_ALG.RANDOM);
    const key = (port: number, slot: number) => encodeSvcKey({ addr: NODE, port, slot, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL });
    svc.update(key(PORTS.drop, 0), encodeSvcVal({ backendId: 0, count: 0, frontendId: 12, flags }));
    svc.update(key(PORTS.select, 1), encodeSvcVal({ backendId: MISSING_BACKEND_ID, count: 0, frontendId: 0, flags: 0 }));
    svc.update(key(PORTS.select, 0), encodeSvcVal({ backendId: 0, count: 1, frontendId: 13, flags }));
  } catch (err) {
    obj.close();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    obj,
    close: () => {
      obj.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function main(): void {
  if (process.getuid?.() !== 0) throw new Error('needs root (BPF)');
  const builds: Record<string, string> = { ours: path.join(repoRoot, 'build', 'kpr_tc.bpf.o'), ...(values.base ? { base: values.base } : {}) };
  const loaded = Object.fromEntries(Object.entries(builds).map(([arm, file]) => [arm, load(file)]));
  const ns: Record<string, Record<Path, number[]>> = Object.fromEntries(Object.keys(builds).map((arm) => [arm, { drop: [], select: [] }]));
  const packets = { drop: tcpSyn(NODE, PORTS.drop), select: tcpSyn(NODE, PORTS.select) };
  try {
    // Each packet takes the path it is meant to: the drop's verdict is TC_ACT_SHOT, the missing backend's KPR_TC_PASS.
    const want: Record<Path, number> = { drop: 2, select: -1 };
    for (const [arm, l] of Object.entries(loaded)) {
      for (const p of Object.keys(PORTS) as Path[]) {
        const got = testRun(l.obj.program('kpr_tc_ext'), packets[p]).retval | 0;
        if (got !== want[p]) throw new Error(`${arm} ${p}: verdict ${got}, expected ${want[p]}`);
      }
    }
    for (let r = 0; r < rounds; r++) {
      const order = Object.keys(builds);
      for (const arm of r % 2 ? order : order.reverse()) {
        for (const p of Object.keys(PORTS) as Path[]) {
          ns[arm][p].push(testRun(loaded[arm].obj.program('kpr_tc_ext'), packets[p], { repeat }).durationNs);
        }
      }
    }
  } finally {
    for (const l of Object.values(loaded)) l.close();
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const med = Object.fromEntries(Object.entries(ns).map(([arm, paths]) => [arm, { drop: median(paths.drop), select: median(paths.select) }]));
  const lines = [`kpr_tc_ext ns per packet (BPF_PROG_TEST_RUN, ${rounds} alternating calls × ${repeat} runs, medians)`];
  for (const p of Object.keys(PORTS) as Path[]) {
    const ours = med.ours[p];
    const base = med.base?.[p];
    lines.push(
      `  ${p.padEnd(7)} this build ${String(ours).padStart(4)} ns${base !== undefined ? `   --base ${String(base).padStart(4)} ns  (${ours - base >= 0 ? '+' : ''}${ours - base} ns)` : ''}`,
    );
  }
  process.stdout.write(lines.join('\n') + '\n' + JSON.stringify({ nsPerPacket: med, rounds, repeat }) + '\n');
}

main();
