/**
 * `make demo`: a one-node cluster in network namespaces, the embedded API
 * server holding examples/, the real agent, and a client reaching the
 * ClusterIP. Prints each step; a failure names the step and the reason.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { BoxCluster, NODE_NAME, waitFor } from './cluster.js';
import { cliBin, repoRoot } from './repo.js';
import type { ClientReport } from './client.js';
import type { KubeObject } from './apiserver.js';

const PODS = [
  { name: 'web-a', ip: '198.18.0.10' },
  { name: 'web-b', ip: '198.18.0.11' },
  { name: 'web-c', ip: '198.18.0.12' },
];
const CLUSTER_IP = '198.19.0.10';

let stepNo = 0;
async function step<T>(title: string, fn: () => Promise<T> | T): Promise<T> {
  stepNo++;
  process.stdout.write(`\n[${stepNo}] ${title}\n`);
  try {
    return await fn();
  } catch (err) {
    throw new Error(`step ${stepNo} (${title}) failed: ${(err as Error).message}`);
  }
}

function spread(rep: ClientReport): string {
  const pods = Object.entries(rep.byPod).sort(([a], [b]) => a.localeCompare(b));
  const bars = pods.map(([pod, n]) => `    ${pod.padEnd(6)} ${String(n).padStart(3)}  ${'#'.repeat(Math.round(n / 2))}`);
  const peers = Object.keys(rep.peers).join(', ');
  return `${bars.join('\n')}\n    ok ${rep.ok}, failed ${rep.failed}; the client saw its peer as ${peers}`;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('the demo needs root: it loads BPF programs and creates network namespaces');
  let box: BoxCluster | undefined;
  try {
    box = await step('create the node namespace and three pods (HTTP :8080, UDP :5353, answering with their name)', () => BoxCluster.create({ pods: PODS }));
    const b = box;
    process.stdout.write(`    run ${b.sandbox.runId}: node namespace ${b.topo.nodeNs}, cgroup ${b.sandbox.cgroupPath}\n`);
    await step(`start the embedded API server and load ${path.join('examples', '')}`, async () => {
      const res = await b.api.loadManifests(path.join(repoRoot, 'examples'));
      process.stdout.write(
        `    ${b.api.url}: ${res.objects.map((o) => `${o.kind} ${o.metadata?.namespace ? o.metadata.namespace + '/' : ''}${o.metadata?.name}`).join(', ')}\n`,
      );
    });
    await step(`start kpr-agent (--node-name ${NODE_NAME}, kubeconfig ${b.kubeconfig})`, async () => {
      const agent = await b.startAgent();
      const init = agent.logs.find((l) => l.msg === 'initial sync complete')!;
      process.stdout.write(`    initial sync: ${init.frontends} frontends, ${init.backends} backends in ${init.cacheSyncedToMapsWrittenMs} ms\n`);
    });
    await step(`60 HTTP requests to the ClusterIP ${CLUSTER_IP}:80 from a process on the node`, async () => {
      const rep = await b.client('http', `${CLUSTER_IP}:80`, ['--count', '60']);
      process.stdout.write(spread(rep) + '\n');
      if (rep.failed > 0 || Object.keys(rep.byPod).length !== 3) throw new Error(`expected all three pods to answer: ${JSON.stringify(rep)}`);
    });
    await step(`60 UDP requests to ${CLUSTER_IP}:53`, async () => {
      const rep = await b.client('udp', `${CLUSTER_IP}:53`, ['--count', '60']);
      process.stdout.write(spread(rep) + '\n');
      if (rep.failed > 0) throw new Error(`UDP requests failed: ${JSON.stringify(rep.errors)}`);
    });
    await step('remove web-a from the EndpointSlice', async () => {
      const eps = b.api.get('EndpointSlice', 'demo', 'web-abc12') as KubeObject;
      eps.endpoints = (eps.endpoints as Array<{ addresses: string[] }>).filter((e) => e.addresses[0] !== PODS[0].ip);
      b.api.update(eps);
      const sync = await waitFor('the agent to apply the change', () => b.agent!.logs.find((l) => l.msg === 'sync' && l.trigger === 'event'));
      process.stdout.write(`    applied ${sync.eventToMapsMs} ms after the event\n`);
    });
    await step(`60 HTTP requests again: web-a gets none`, async () => {
      const rep = await b.client('http', `${CLUSTER_IP}:80`, ['--count', '60']);
      process.stdout.write(spread(rep) + '\n');
      if (rep.byPod['web-a']) throw new Error('web-a still received connections');
    });
    await step('bin/kpr service list', () => {
      const out = execFileSync(cliBin, ['service', 'list', '--bpffs', b.sandbox.bpffsDir], { encoding: 'utf8' });
      process.stdout.write(out.replace(/^/gm, '    '));
    });
  } finally {
    await step('tear everything down', async () => {
      await box?.close();
    });
  }
  process.stdout.write('\ndemo complete\n');
}

main().catch((err) => {
  process.stderr.write(`\ndemo failed: ${(err as Error).message}\n`);
  process.exit(1);
});
