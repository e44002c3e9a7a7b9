/**
 * The sandbox's client: runs inside the node namespace and the run's cgroup,
 * so its sockets go through kpr's hooks like any process on the node. Prints
 * one JSON line with what happened.
 *
 *   client.js http  --target IP:PORT --count N
 *   client.js udp   --target IP:PORT --count N [--connected]
 *   client.js loop  --target IP:PORT --duration-ms D
 *   client.js once  --target IP:PORT
 */
import net from 'node:net';
import dgram from 'node:dgram';
import { parseArgs } from 'node:util';

export interface ClientReport {
  ok: number;
  failed: number;
  byPod: Record<string, number>;
  errors: Record<string, number>;
  /** Peer addresses the application saw (getpeername / recvfrom). */
  peers: Record<string, number>;
  /** Client addresses the backends reported seeing. */
  seenAs: Record<string, number>;
  elapsedMs: number;
  latenciesUs?: number[];
}

function emptyReport(): ClientReport {
  return { ok: 0, failed: 0, byPod: {}, errors: {}, peers: {}, seenAs: {}, elapsedMs: 0 };
}

function bump(rec: Record<string, number>, key: string): void {
  rec[key] = (rec[key] ?? 0) + 1;
}

function splitTarget(target: string): { host: string; port: number } {
  const i = target.lastIndexOf(':');
  return { host: target.slice(0, i), port: Number(target.slice(i + 1)) };
}

/** One HTTP/1.0 request on a fresh connection; resolves with the body and the peer the app saw. */
function httpOnce(host: string, port: number, timeoutMs: number): Promise<{ body: string; peer: string }> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host, port });
    let body = '';
    let peer = '';
    const timer = setTimeout(() => sock.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })), timeoutMs);
    sock.once('connect', () => {
      peer = `${sock.remoteAddress}:${sock.remotePort}`;
      sock.write('GET / HTTP/1.0\r\n\r\n');
    });
    sock.setEncoding('utf8');
    sock.on('data', (d) => (body += d));
    sock.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    sock.once('close', (hadError) => {
      clearTimeout(timer);
      if (!hadError) resolve({ body: body.slice(body.indexOf('\r\n\r\n') + 4), peer });
    });
  });
}

function record(rep: ClientReport, body: string, peer: string): void {
  const [pod, seenAs] = body.trim().split(' ');
  rep.ok++;
  bump(rep.byPod, pod);
  bump(rep.peers, peer);
  if (seenAs) bump(rep.seenAs, seenAs);
}

function fail(rep: ClientReport, err: unknown): void {
  rep.failed++;
  bump(rep.errors, (err as NodeJS.ErrnoException).code ?? String(err));
}

async function runHttp(target: string, count: number, timeoutMs: number): Promise<ClientReport> {
  const { host, port } = splitTarget(target);
  const rep = emptyReport();
  for (let i = 0; i < count; i++) {
    try {
      const { body, peer } = await httpOnce(host, port, timeoutMs);
      record(rep, body, peer);
    } catch (err) {
      fail(rep, err);
    }
  }
  return rep;
}

async function runUdp(target: string, count: number, connected: boolean, timeoutMs: number): Promise<ClientReport> {
  const { host, port } = splitTarget(target);
  const rep = emptyReport();
  for (let i = 0; i < count; i++) {
    const sock = dgram.createSocket('udp4');
    try {
      const reply = await new Promise<{ body: string; peer: string }>((resolve, reject) => {
        const timer = setTimeout(() => reject(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })), timeoutMs);
        sock.once('message', (msg, rinfo) => {
          clearTimeout(timer);
          resolve({ body: msg.toString(), peer: `${rinfo.address}:${rinfo.port}` });
        });
        sock.once('error', (err) => {
          clearTimeout(timer);
          reject(err);
        });
        const send = () =>
          connected
            ? sock.send('who', (err) => err && reject(err))
            : sock.send('who', port, host, (err) => err && reject(err));
        if (connected) sock.connect(port, host, send);
        else send();
      });
      record(rep, reply.body, reply.peer);
    } catch (err) {
      fail(rep, err);
    } finally {
      sock.close();
    }
  }
  return rep;
}

/** Connects in a loop until the duration ends or SIGTERM; every failure is counted. */
async function runLoop(target: string, durationMs: number, timeoutMs: number): Promise<ClientReport> {
  const { host, port } = splitTarget(target);
  const rep = emptyReport();
  let stop = false;
  process.once('SIGTERM', () => (stop = true));
  const end = Date.now() + durationMs;
  while (!stop && Date.now() < end) {
    try {
      const { body, peer } = await httpOnce(host, port, timeoutMs);
      record(rep, body, peer);
    } catch (err) {
      fail(rep, err);
    }
  }
  return rep;
}

async function main(): Promise<void> {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: {
      target: { type: 'string' },
      count: { type: 'string', default: '1' },
      connected: { type: 'boolean', default: false },
      'duration-ms': { type: 'string', default: '1000' },
      'timeout-ms': { type: 'string', default: '2000' },
    },
  });
  const mode = positionals[0];
  const target = values.target;
  if (!target) throw new Error('--target IP:PORT is required');
  const timeoutMs = Number(values['timeout-ms']);
  const started = process.hrtime.bigint();
  let rep: ClientReport;
  switch (mode) {
    case 'http':
      rep = await runHttp(target, Number(values.count), timeoutMs);
      break;
    case 'udp':
      rep = await runUdp(target, Number(values.count), values.connected, timeoutMs);
      break;
    case 'loop':
      rep = await runLoop(target, Number(values['duration-ms']), timeoutMs);
      break;
    case 'once':
      rep = await runHttp(target, 1, timeoutMs);
      break;
    default:
      throw new Error(`unknown mode ${mode}`);
  }
  rep.elapsedMs = Number(process.hrtime.bigint() - started) / 1e6;
  process.stdout.write(JSON.stringify(rep) + '\n');
}

main().catch((err) => {
  process.stderr.write(`client: ${(err as Error).message}\n`);
  process.exit(1);
});
