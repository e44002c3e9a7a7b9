/**
 * kpr monitor's cost per decision, timed by the kernel: BPF_PROG_TEST_RUN
 * of kpr_tc_ext on a SYN to a NodePort without endpoints (every run is a
 * decision, a drop, and leaves no state behind), --repeat runs per call,
 * with the events off and on (the ring drained after each call, as
 * `kpr monitor` drains it), and with --base another build's kpr_tc.bpf.o
 * (one without kpr monitor: what the switch costs while off). The arms
 * alternate call by call; the figures are medians of the calls' averages.
 *
 *   make build && node dist/bench/monitor-emit.js [--base OTHER/build/kpr_tc.bpf.o] [--rounds 30] [--repeat 2000]
 */
import path from 'node:path';
import { rmSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { BpfObject, RingBuffer, ensureBpffs, testRun } from '../native/index.js';
import { encodeConfig, encodeSvcKey, encodeSvcVal, IPPROTO, SCOPE, SVC_FLAG } from '../agent/maps/layout.js';
import { RINGS } from '../agent/maps/registry.js';
import { MonitorSwitch } from '../agent/cli/monitor-switch.js';
import { newRunId } from '../sandbox/netns.js';
import { repoRoot } from '../sandbox/repo.js';
import { tcpSyn } from './tc-frames.js';

const { values } = parseArgs({ options: { base: { type: 'string' }, rounds: { type: 'string', default: '30' }, repeat: { type: 'string', default: '2000' } } });
const rounds = Number(values.rounds);
const repeat = Number(values.repeat);
const NODE = '198.18.1.1';
const NODE_PORT = 30099;

/** The object loaded on pins of its own, with the node's address and the NodePort without endpoints. */
function load(file: string): { obj: BpfObject; close(): void } {
  const dir = ensureBpffs(path.join('/sys/fs/bpf', newRunId('kpr-bench-monitor')));
  const obj = BpfObject.open(file, { pinMapsDir: dir });
  obj.load();
  obj
    .map('kpr_config')
    .update(
      Buffer.alloc(4),
      encodeConfig({ hostNetnsCookie: 0n, snatV4: NODE, snatV6: '', tcpTimeoutS: 300, tcpClosingTimeoutS: 10, udpTimeoutS: 30, flags: 0 }),
    );
  const key = encodeSvcKey({ addr: NODE, port: NODE_PORT, slot: 0, proto: IPPROTO.TCP, scope: SCOPE.EXTERNAL });
  obj.map('kpr_svc').update(key, encodeSvcVal({ backendId: 0, count: 0, frontendId: 12, flags: SVC_FLAG.NODE_PORT }));
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
  const pkt = tcpSyn(NODE, NODE_PORT);
  const ours = load(path.join(repoRoot, 'build', 'kpr_tc.bpf.o'));
  const base = values.base ? load(values.base) : undefined;
  const sw = new MonitorSwitch(ours.obj.map('kpr_monitor'));
  let events = 0;
  const ring = new RingBuffer(ours.obj.map(RINGS.events.name), () => void events++);
  const perRun = (obj: BpfObject) => testRun(obj.program('kpr_tc_ext'), pkt, { repeat }).durationNs;
  const arms: Record<string, number[]> = { off: [], on: [], ...(base ? { base: [] } : {}) };
  try {
    for (let r = 0; r < rounds; r++) {
      const order = Object.keys(arms);
      for (const arm of r % 2 ? order : order.reverse()) {
        if (arm === 'base') arms.base.push(perRun(base!.obj));
        else if (arm === 'off') arms.off.push(perRun(ours.obj));
        else {
          sw.renew();
          arms.on.push(perRun(ours.obj));
          sw.release();
          ring.consume();
        }
      }
    }
  } finally {
    ring.close();
    ours.close();
    base?.close();
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const ns = Object.fromEntries(Object.entries(arms).map(([a, xs]) => [a, median(xs)]));
  const lines = [
    `kpr monitor per decision (kpr_tc_ext, a drop; BPF_PROG_TEST_RUN, ${rounds} alternating calls × ${repeat} runs, medians)`,
    ...(base ? [`  without kpr monitor (--base)  ${ns.base} ns`] : []),
    `  off                           ${ns.off} ns${base ? `  (${ns.off - ns.base >= 0 ? '+' : ''}${ns.off - ns.base} ns)` : ''}`,
    `  on, ring drained              ${ns.on} ns  (+${ns.on - ns.off} ns over off; ${events} events read of ${rounds * repeat})`,
  ];
  process.stdout.write(lines.join('\n') + '\n' + JSON.stringify({ nsPerDecision: ns, rounds, repeat, events }) + '\n');
}

main();
