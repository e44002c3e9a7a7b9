/**
 * The sandbox's client: runs inside the node namespace and the run's cgroup,
 * so its sockets go through kpr's hooks like any process on the node. Prints
 * one JSON line with what happened.
 *
 *   client.js http  --target IP:PORT --count N
 *   client.js udp   --target IP:PORT --count N [--connected]
 *   client.js loop  --target IP:PORT --duration-ms D
 *   client.js once  --target IP:PORT
 *   client.js udploop --target IP:PORT --duration-ms D [--interval-ms I]  (one connected UDP socket, reconnecting on error)
 *   client.js get   --target IP:PORT [--path /p]   (one HTTP/1.0 GET; status, headers and body in `responses`)
 *   client.js slowbody --target IP:PORT --path /p --connections N --opens-per-second R --probe-path /q --count P --interval-ms I
 *                  (a slow-body flood of N connections and P probes beside it: slow-body.ts; ok = probes answered 200)
 *   client.js hold  [--echo IP:PORT] [--udp IP:PORT [--udp-new]] [--http IP:PORT] [--flows N]  (long-lived flows and churn: hold.ts)
 * --bind IP binds the client socket to a source address first; --src-port P (udp) to a
 * source port too, as `nc -u -p P` does; --message M (udp) sends M instead of "who".
 */
import { scaled } from './time-scale.js';
import net from 'node:net';
import dgram from 'node:dgram';
import { parseArgs } from 'node:util';
import { createInterface } from 'node:readline';
import { bump, emptyReport, fail, record, splitTarget, type ClientReport } from './client-report.js';
import { runHold } from './hold.js';
import { slowBodyFlood, type SlowBodyReport } from './slow-body.js';

export type { ClientReport } from './client-report.js';

/** One HTTP/1.0 request on a fresh connection; resolves with the body and the peer the app saw. */
function httpOnce(host: string, port: number, timeoutMs: number, path = '/'): Promise<{ body: string; peer: string; raw: string }> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host, port, ...(bindAddress ? { localAddress: bindAddress } : {}) });
    let body = '';
    let peer = '';
    let localPort: number | undefined;
    const timer = setTimeout(
      // A socket still connecting has its port already (getsockname): it names the flow in conntrack.
      () =>
        sock.destroy(
          Object.assign(new Error(localPort ? 'timeout' : 'timeout (not connected)'), { code: 'ETIMEDOUT', localPort: localPort ?? sock.localPort }),
        ),
      timeoutMs,
    );
    sock.once('connect', () => {
      localPort = sock.localPort;
      peer = `${sock.remoteAddress}:${sock.remotePort}`;
      sock.write(`GET ${path} HTTP/1.0\r\n\r\n`);
    });
    sock.setEncoding('utf8');
    sock.on('data', (d) => (body += d));
    sock.once('error', (err) => {
      clearTimeout(timer);
      reject(Object.assign(err, { localPort: localPort ?? (err as { localPort?: number }).localPort }));
    });
    sock.once('close', (hadError) => {
      clearTimeout(timer);
      if (!hadError) resolve({ body: body.slice(body.indexOf('\r\n\r\n') + 4), peer, raw: body });
    });
  });
}

/** Source address for client sockets (--bind); undefined = the kernel's choice. */
let bindAddress: string | undefined;
/** Source port for UDP sockets (--src-port); 0 = the kernel's choice. */
let srcPort = 0;
/** What a UDP request carries (--message). */
let udpMessage = 'who';

/** Splits a raw HTTP/1.x response into status, lower-cased headers and body. */
function parseResponse(raw: string): { status: number; headers: Record<string, string>; body: string } {
  const end = raw.indexOf('\r\n\r\n');
  const head = (end < 0 ? raw : raw.slice(0, end)).split('\r\n');
  const status = Number(/^HTTP\/\d\.\d (\d{3})/.exec(head[0] ?? '')?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of head.slice(1)) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status, headers, body: end < 0 ? '' : raw.slice(end + 4) };
}

async function runGet(target: string, path: string, timeoutMs: number): Promise<ClientReport> {
  const { host, port } = splitTarget(target);
  const rep = emptyReport();
  try {
    const { raw, peer } = await httpOnce(host, port, timeoutMs, path);
    rep.ok++;
    bump(rep.peers, peer);
    rep.responses = [parseResponse(raw)];
  } catch (err) {
    fail(rep, err);
  }
  return rep;
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

async function runUdp(target: string, count: number, connected: boolean, timeoutMs: number, message = udpMessage, fromPort = srcPort): Promise<ClientReport> {
  const { host, port } = splitTarget(target);
  const rep = emptyReport();
  for (let i = 0; i < count; i++) {
    const sock = dgram.createSocket(net.isIPv6(host) ? 'udp6' : 'udp4');
    try {
      if (bindAddress || fromPort)
        await new Promise<void>((resolve) => sock.bind({ ...(bindAddress ? { address: bindAddress } : {}), port: fromPort }, resolve));
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
        const send = () => (connected ? sock.send(message, (err) => err && reject(err)) : sock.send(message, port, host, (err) => err && reject(err)));
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

/** One step of a batch: what one invocation of the other modes would do. */
export interface BatchStep {
  mode: 'http' | 'udp' | 'once' | 'get' | 'sleep';
  target?: string;
  count?: number;
  timeoutMs?: number;
  path?: string;
  message?: string;
  /** udp: the source port (as `nc -u -p`). */
  srcPort?: number;
  /** sleep: how long. */
  ms?: number;
  /**
   * Start the step and go on to the next one without waiting for its end (its report still comes
   * in its place): steps that must fail then wait out their timeouts together, not one after the
   * other, and `sleep` steps between them still space their starts.
   */
  overlap?: boolean;
}

/** One step, timed. */
async function runStep(s: BatchStep, defaultTimeoutMs: number): Promise<ClientReport> {
  const timeoutMs = s.timeoutMs !== undefined ? scaled(s.timeoutMs) : defaultTimeoutMs;
  const started = process.hrtime.bigint();
  let r: ClientReport;
  if (s.mode === 'sleep') {
    await new Promise((resolve) => setTimeout(resolve, scaled(s.ms ?? 0)));
    r = emptyReport();
  } else if (s.mode === 'udp') r = await runUdp(s.target!, s.count ?? 1, false, timeoutMs, s.message ?? udpMessage, s.srcPort ?? srcPort);
  else if (s.mode === 'get') r = await runGet(s.target!, s.path ?? '/', timeoutMs);
  else r = await runHttp(s.target!, s.mode === 'once' ? 1 : (s.count ?? 1), timeoutMs);
  r.elapsedMs = Number(process.hrtime.bigint() - started) / 1e6;
  return r;
}

/** Runs the steps in order in this one process (starting a client costs more than most requests); `overlap` steps run on beside the next ones. */
async function runBatch(steps: BatchStep[], defaultTimeoutMs: number): Promise<ClientReport> {
  const rep = emptyReport();
  const running: Array<Promise<ClientReport>> = [];
  for (const s of steps) {
    const r = runStep(s, defaultTimeoutMs);
    running.push(r);
    if (!s.overlap) await r;
  }
  rep.steps = await Promise.all(running);
  for (const r of rep.steps) {
    rep.ok += r.ok;
    rep.failed += r.failed;
  }
  return rep;
}

/** `serve`: one batch per stdin line, one JSON report per stdout line, until stdin ends. */
async function runServe(defaultTimeoutMs: number): Promise<void> {
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const started = process.hrtime.bigint();
    const rep = await runBatch(JSON.parse(line) as BatchStep[], defaultTimeoutMs);
    rep.elapsedMs = Number(process.hrtime.bigint() - started) / 1e6;
    process.stdout.write(JSON.stringify(rep) + '\n');
  }
}

/**
 * A long-lived connected UDP client, as a DNS resolver is: one socket,
 * connected once, a request every interval. If the socket fails (kpr
 * destroys sockets whose backend left) it reconnects, as resolvers do.
 * `timeline` records which pod answered, in order, and `errors` the failures.
 */
async function runUdpLoop(target: string, durationMs: number, intervalMs: number): Promise<ClientReport & { timeline: string[]; reconnects: number }> {
  const { host, port } = splitTarget(target);
  const rep = { ...emptyReport(), timeline: [] as string[], reconnects: 0 };
  const end = Date.now() + durationMs;
  let sock: dgram.Socket | undefined;
  let pending: ((body: string | Error) => void) | undefined;
  const open = () =>
    new Promise<dgram.Socket>((resolve) => {
      const s = dgram.createSocket(net.isIPv6(host) ? 'udp6' : 'udp4');
      s.on('message', (msg) => pending?.(msg.toString()));
      s.on('error', (err) => pending?.(err));
      s.connect(port, host, () => resolve(s));
    });
  while (Date.now() < end) {
    if (!sock) sock = await open();
    const s = sock;
    const answer = await new Promise<string | Error>((resolve) => {
      const timer = setTimeout(() => resolve(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })), intervalMs * 4);
      pending = (v) => {
        clearTimeout(timer);
        resolve(v);
      };
      s.send('who', (err) => err && pending?.(err));
    });
    pending = undefined;
    if (answer instanceof Error) {
      fail(rep, answer);
      if ((answer as NodeJS.ErrnoException).code !== 'ETIMEDOUT') {
        s.close();
        sock = undefined;
        rep.reconnects++;
      }
    } else {
      const [pod] = answer.trim().split(' ');
      rep.ok++;
      bump(rep.byPod, pod);
      rep.timeline.push(pod);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  sock?.close();
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
      'interval-ms': { type: 'string', default: '50' },
      // Scaled: inside the kernel VMs (software CPUs) a served request can take longer than 2 s.
      'timeout-ms': { type: 'string', default: '2000' },
      path: { type: 'string', default: '/' },
      bind: { type: 'string' },
      'src-port': { type: 'string', default: '0' },
      message: { type: 'string', default: 'who' },
      plan: { type: 'string', default: '[]' },
      echo: { type: 'string' },
      udp: { type: 'string' },
      'udp-new': { type: 'boolean', default: false },
      http: { type: 'string' },
      flows: { type: 'string', default: '2' },
      connections: { type: 'string', default: '256' },
      'opens-per-second': { type: 'string', default: '64' },
      'probe-path': { type: 'string', default: '/healthz' },
    },
  });
  const mode = positionals[0];
  const target = values.target ?? '';
  if (mode === 'serve') {
    await runServe(scaled(Number(values['timeout-ms'])));
    return;
  }
  if (!target && mode !== 'hold' && mode !== 'batch') throw new Error('--target IP:PORT is required');
  // A slower CPU (the kernel-matrix VMs) waits longer before calling silence a drop.
  const timeoutMs = scaled(Number(values['timeout-ms']));
  bindAddress = values.bind;
  srcPort = Number(values['src-port']);
  udpMessage = values.message!;
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
    case 'udploop':
      rep = await runUdpLoop(target, Number(values['duration-ms']), Number(values['interval-ms']));
      break;
    case 'once':
      rep = await runHttp(target, 1, timeoutMs);
      break;
    case 'get':
      rep = await runGet(target, values.path!, timeoutMs);
      break;
    case 'batch':
      rep = await runBatch(JSON.parse(values.plan!) as BatchStep[], timeoutMs);
      break;
    case 'slowbody': {
      const { host, port } = splitTarget(target);
      const flood: SlowBodyReport = await slowBodyFlood({
        host,
        port,
        path: values.path!,
        connections: Number(values.connections),
        opensPerSecond: Number(values['opens-per-second']),
        probePath: values['probe-path']!,
        probes: Number(values.count),
        intervalMs: Number(values['interval-ms']),
        timeoutMs,
      });
      rep = { ...emptyReport(), ok: flood.answered, failed: flood.probes - flood.answered, errors: flood.outcomes, slowBody: flood };
      break;
    }
    case 'hold':
      rep = await runHold({
        ...(values.echo ? { echo: values.echo } : {}),
        ...(values.udp ? { udp: values.udp } : {}),
        ...(values.http ? { http: values.http } : {}),
        udpNew: values['udp-new']!,
        flows: Number(values.flows),
        intervalMs: Number(values['interval-ms']),
        durationMs: Number(values['duration-ms']),
        timeoutMs,
        httpOnce,
      });
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
