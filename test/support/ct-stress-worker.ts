/**
 * One CPU's share of the conntrack stress run (test/support/ct-stress.ts):
 * a worker thread pinned to its CPU, in the run's node namespace, driving
 * kpr_tc_ext (client side) and kpr_tc_pod (the local backends' answers)
 * through BPF_PROG_TEST_RUN. It opens its live flows (SYN, the backend's
 * SYN-ACK, ACK), then churns: closes a live flow and reopens it on the same
 * client port, and opens and closes flows of a small port pool that stay
 * closed (expired entries for the sweeper running meanwhile). It answers with
 * what each live flow was given (backend, SNAT port) and the packets that
 * did not come out as they should.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { pinThreadToCpu, testRunFd, withNetns } from '../../native/index.js';
import { buildPacket, parsePacket, TCP_ACK, TCP_FIN, TCP_SYN } from './packets.js';

export interface StressJob {
  cpu: number;
  ext: number;
  pod: number;
  nsPath: string;
  node: string;
  nodePort: number;
  client: string;
  /** Live flows: client ports firstPort .. firstPort + flows - 1. */
  firstPort: number;
  flows: number;
  /** Ports of flows opened and closed again (left closed). */
  poolPort: number;
  pool: number;
  /** Close-and-reopen rounds over the live flows (port reuse). */
  churn: number;
}

export interface StressFlow {
  port: number;
  backend: string;
  backendPort: number;
  snatPort: number;
}

export interface StressReport {
  cpu: number;
  flows: StressFlow[];
  /** A SYN that was not DNATed. */
  notTranslated: number;
  /** A backend's answer that was not reverse-NATed back to the client: what a client sees reset. */
  repliesMissed: number;
  packets: number;
}

const TC_ACT_SHOT = 2;

function run(job: StressJob): StressReport {
  pinThreadToCpu(job.cpu);
  const rep: StressReport = { cpu: job.cpu, flows: [], notTranslated: 0, repliesMissed: 0, packets: 0 };
  const live = new Map<number, StressFlow>();
  const send = (fd: number, name: string, src: string, dst: string, sport: number, dport: number, flags: number) => {
    rep.packets++;
    const r = testRunFd(fd, name, buildPacket({ src, dst, sport, dport, proto: 'TCP', tcpFlags: flags }));
    return r.retval === TC_ACT_SHOT || r.data.length < 34 ? undefined : parsePacket(r.data);
  };
  const fromClient = (port: number, flags: number) => send(job.ext, 'kpr_tc_ext', job.client, job.node, port, job.nodePort, flags);
  const fromBackend = (f: StressFlow, flags: number) => {
    const out = send(job.pod, 'kpr_tc_pod', f.backend, job.node, f.backendPort, f.snatPort, flags);
    if (!out || out.dst !== job.client || out.dport !== f.port || out.sport !== job.nodePort) rep.repliesMissed++;
  };
  const open = (port: number): StressFlow | undefined => {
    const syn = fromClient(port, TCP_SYN);
    if (!syn || syn.dst === job.node) {
      rep.notTranslated++;
      return undefined;
    }
    const f: StressFlow = { port, backend: syn.dst, backendPort: syn.dport, snatPort: syn.sport };
    fromBackend(f, TCP_SYN | TCP_ACK);
    fromClient(port, TCP_ACK);
    return f;
  };
  const close = (f: StressFlow) => {
    fromClient(f.port, TCP_FIN | TCP_ACK);
    fromBackend(f, TCP_FIN | TCP_ACK);
  };
  withNetns(job.nsPath, () => {
    for (let i = 0; i < job.flows; i++) {
      const f = open(job.firstPort + i);
      if (f) live.set(f.port, f);
    }
    for (let i = 0; i < job.churn; i++) {
      const port = job.firstPort + ((i * 7919) % job.flows);
      const old = live.get(port);
      if (old) close(old);
      live.delete(port);
      const f = open(port);
      if (f) live.set(port, f);
      if (job.pool > 0) {
        const gone = open(job.poolPort + (i % job.pool));
        if (gone) close(gone);
      }
    }
  });
  rep.flows = [...live.values()];
  return rep;
}

parentPort?.postMessage(run(workerData as StressJob));
