/**
 * SCTP in the conformance box (rule 39 of docs/semantics.md). Node has no
 * SCTP, so build/kpr-sctp-peer (sandbox/sctp-peer.c, `make build`) does the
 * wire work: `inject` sends SCTP INITs through a raw socket, which is what an
 * SCTP connect() puts on the wire and, like an SCTP socket and unlike a TCP
 * or UDP one, passes no cgroup sock_addr hook; `sniff` reports every INIT to
 * a port that reaches a namespace. Raw sockets need no sctp.ko, so these
 * tests run on a kernel without SCTP too (this machine's has none), and the
 * agent under test never loads it.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { repoRoot } from '../../sandbox/repo.js';
import type { NodeName } from '../../sandbox/two-node.js';
import { metricsUrlOf, metricValue } from '../support/agent-metrics.js';
import { eventually, type ConformanceBox, type Who } from './harness.js';

export const SCTP_PEER = path.join(repoRoot, 'build', 'kpr-sctp-peer');

function peer(): string {
  assert.ok(fs.existsSync(SCTP_PEER), `${SCTP_PEER} is missing: run make build (it compiles sandbox/sctp-peer.c)`);
  return SCTP_PEER;
}

function nsOf(c: ConformanceBox, who: Who): { ns: string; node: NodeName } {
  return 'pod' in who ? { ns: c.podNs(who.pod), node: c.pod(who.pod).node } : { ns: c.box.nodes[who.node].ns, node: who.node };
}

/** What became of `count` INITs: sent, or failed with an errno name (ENETUNREACH: no route). */
export interface InjectReport {
  sent: number;
  errors: Record<string, number>;
}

/** `count` SCTP INITs from `who` (its namespace, below its node's cgroup) to ip:port. */
export async function injectInits(c: ConformanceBox, who: Who, ip: string, port: number, count: number): Promise<InjectReport> {
  const { ns, node } = nsOf(c, who);
  const child = c.box.spawnIn(ns, peer(), ['inject', ip, String(port), String(count)], { cgroupOf: node, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (err += d));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  assert.equal(code, 0, `kpr-sctp-peer inject from ${JSON.stringify(who)}: ${err}`);
  const rep = JSON.parse(out) as InjectReport;
  assert.equal(rep.sent + Object.values(rep.errors).reduce((a, b) => a + b, 0), count, out);
  return rep;
}

/** The SCTP INITs to `port` that reached a pod: "SRC_IP:SRC_PORT" each. */
export class InitSniffer {
  readonly seen: string[] = [];
  private constructor(
    readonly pod: string,
    private readonly child: ChildProcess,
  ) {}

  static async start(c: ConformanceBox, pod: string, port: number): Promise<InitSniffer> {
    const child = c.box.spawnIn(c.podNs(pod), peer(), ['sniff', String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
    const s = new InitSniffer(pod, child);
    const lines = createInterface({ input: child.stdout! });
    await new Promise<void>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`kpr-sctp-peer sniff in ${pod} exited ${code}`)));
      lines.on('line', (l) => {
        if (l === 'listening') resolve();
        else if (l.startsWith('INIT ')) s.seen.push(l.slice(5));
      });
    });
    return s;
  }

  stop(): void {
    this.child.kill('SIGKILL');
  }
}

/** kpr_datapath_drops_total{reason="sctp"} of the agent on `node`. */
export async function sctpDrops(c: ConformanceBox, node: NodeName): Promise<number> {
  const agent = c.box.agents.get(node);
  assert.ok(agent, `agent on ${node}`);
  return metricValue(await metricsUrlOf(agent), 'kpr_datapath_drops_total', { reason: 'sctp' });
}

/**
 * What kpr does with a Granular Check's SCTP dials (rule 39 of
 * docs/semantics.md): three INITs from `who` to each of `targets`
 * ([address, port]); once `probe` (a pod of node-1 and a frontend address)
 * shows node-1 drops SCTP to the Service, no endpoint sees one, each INIT
 * from a pod is dropped and counted on node-1 (from the node kpr never sees
 * them: a ClusterIP has no route there, ENETUNREACH), and an INIT sent
 * straight to each endpoint (`controls`: pod name → its address; the
 * control: the network carries SCTP and the listeners hear it) arrives.
 * The controls go after the INITs to the frontends, so once they arrived
 * the others have crossed node-1's hooks: one scrape of node-1's metrics
 * then counts them (a scrape costs seconds in the kernel legs' guests).
 */
export async function assertSctpNotCarried(
  c: ConformanceBox,
  who: Who,
  targets: Array<[string, number]>,
  probe: { from: Who; target: [string, number] },
  controls: Record<string, string>,
  targetPort: number,
): Promise<void> {
  const before0 = await sctpDrops(c, 'node-1');
  // The count once the probe's INIT is in it: nothing else sends SCTP until the INITs below.
  const before = await eventually('node-1 drops SCTP to the Service', async () => {
    assert.equal((await injectInits(c, probe.from, probe.target[0], probe.target[1], 1)).sent, 1);
    const drops = await sctpDrops(c, 'node-1');
    return drops > before0 ? drops : undefined;
  });
  const pods = Object.keys(controls);
  const sniffers = await Promise.all(pods.map((pod) => InitSniffer.start(c, pod, targetPort)));
  try {
    for (const [ip, port] of targets) {
      const rep = await injectInits(c, who, ip, port, 3);
      // Only the node has no route to a ClusterIP (the first target): a pod's default route leads to its node.
      if ('pod' in who || ip !== targets[0][0]) assert.equal(rep.sent, 3, `${ip}:${port}: ${JSON.stringify(rep.errors)}`);
      else assert.equal(rep.sent + (rep.errors.ENETUNREACH ?? 0), 3, `${ip}:${port}: ${JSON.stringify(rep.errors)}`);
    }
    for (const pod of pods) assert.equal((await injectInits(c, who, controls[pod], targetPort, 1)).sent, 1, `straight to ${pod}`);
    await eventually('the INITs sent straight to each endpoint arrive', async () => sniffers.every((s) => s.seen.length > 0));
    if ('pod' in who) {
      const want = 3 * targets.length;
      const dropped = await eventually(`${want} INITs from ${who.pod} dropped and counted on node-1`, async () => {
        const n = (await sctpDrops(c, 'node-1')) - before;
        return n >= want ? n : undefined;
      });
      assert.equal(dropped, want, 'one drop per INIT');
    }
    for (const s of sniffers) assert.equal(s.seen.length, 1, `${s.pod} saw only the INIT sent to it, none through the Service: ${s.seen.join(', ')}`);
  } finally {
    for (const s of sniffers) s.stop();
  }
}
