/**
 * The sandbox client's `hold` mode: long-lived flows and connection churn at
 * once, for tests that change the datapath under traffic (a map migration):
 *
 *   client.js hold [--echo IP:PORT] [--udp IP:PORT [--udp-new]] [--http IP:PORT]
 *                  [--flows N] [--interval-ms I] [--duration-ms D]
 *
 *  - echo: N TCP connections to pod-server's line echo port, each sending a
 *    line every interval; every reply must come back on time, from the pod
 *    that answered first on that connection (a flow moved to another
 *    backend, or reset, is a failure), and getpeername must say the address
 *    connected to;
 *  - udp: N connected UDP sockets sending every interval; every reply must
 *    come from the address the socket connected to (the reverse translation
 *    held) and from the same pod as the first; with --udp-new also a new
 *    connected socket per request, back to back;
 *  - http: new TCP connections back to back, one HTTP request each.
 * Runs until SIGTERM or the duration ends. A failed flow is counted and
 * opened again. The report sums every kind and lists each in `kinds`.
 */
import net from 'node:net';
import dgram from 'node:dgram';
import { emptyReport, fail, record, splitTarget, type ClientReport } from './client-report.js';

export type HoldKind = 'echo' | 'udp' | 'udpNew' | 'http';

export interface HoldReport extends ClientReport {
  kinds: Partial<Record<HoldKind, ClientReport>>;
  /** The first failures' messages, for a test's assertion text. */
  examples: string[];
}

const examples: string[] = [];

/**
 * Counts a failure and keeps its message (the first few), with the time and
 * the client's port: what a test needs to find the flow in the agent's log
 * or a packet capture.
 */
function failed(rep: ClientReport, kind: HoldKind, err: unknown): void {
  fail(rep, err);
  const port = (err as { localPort?: number }).localPort;
  if (examples.length < 10) examples.push(`${new Date().toISOString()} ${kind}: ${(err as Error).message}${port ? ` (client port ${port})` : ''}`);
}

export interface HoldOptions {
  echo?: string;
  udp?: string;
  udpNew: boolean;
  http?: string;
  flows: number;
  intervalMs: number;
  durationMs: number;
  timeoutMs: number;
  /** One HTTP request on a new connection (client.ts's). */
  httpOnce(host: string, port: number, timeoutMs: number): Promise<{ body: string; peer: string }>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function coded(code: string, message = code): Error {
  return Object.assign(new Error(message), { code });
}

/** Lines from a TCP socket; next() fails with the socket's error, on close, or after `timeoutMs`. */
function lineReader(sock: net.Socket) {
  const lines: string[] = [];
  let buf = '';
  let ended: Error | undefined;
  let waiter: ((v: string | Error) => void) | undefined;
  const settle = () => {
    if (!waiter) return;
    const w = waiter;
    if (lines.length) {
      waiter = undefined;
      w(lines.shift()!);
    } else if (ended) {
      waiter = undefined;
      w(ended);
    }
  };
  sock.setEncoding('utf8');
  sock.on('data', (d: string) => {
    buf += d;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      lines.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
    settle();
  });
  sock.on('error', (err) => {
    ended ??= err;
    settle();
  });
  sock.on('close', () => {
    ended ??= coded('ECLOSED', 'connection closed by the peer');
    settle();
  });
  return {
    next(timeoutMs: number): Promise<string> {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiter = undefined;
          reject(coded('ETIMEDOUT'));
        }, timeoutMs);
        waiter = (v) => {
          clearTimeout(timer);
          if (v instanceof Error) reject(v);
          else resolve(v);
        };
        settle();
      });
    },
  };
}

function connectTcp(host: string, port: number, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host, port });
    const timer = setTimeout(() => {
      sock.destroy();
      reject(coded('ETIMEDOUT'));
    }, timeoutMs);
    sock.once('connect', () => {
      clearTimeout(timer);
      resolve(sock);
    });
    sock.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

async function echoFlow(target: string, rep: ClientReport, o: HoldOptions, running: () => boolean): Promise<void> {
  const { host, port } = splitTarget(target);
  while (running()) {
    let sock: net.Socket | undefined;
    try {
      sock = await connectTcp(host, port, o.timeoutMs);
      const peer = `${sock.remoteAddress}:${sock.remotePort}`;
      if (peer !== `${host}:${port}`) throw coded('wrong-peer', `connected to ${target}, getpeername says ${peer}`);
      const lines = lineReader(sock);
      let pod: string | undefined;
      for (let i = 0; running(); i++) {
        sock.write(`${i}\n`);
        const [who, n] = (await lines.next(o.timeoutMs)).split(' ');
        if (n !== String(i)) throw coded('bad-echo');
        if (pod !== undefined && who !== pod) throw coded('pod-changed', `${pod} then ${who}`);
        pod = who;
        record(rep, who!, peer);
        await sleep(o.intervalMs);
      }
    } catch (err) {
      failed(rep, 'echo', err);
      await sleep(o.intervalMs);
    } finally {
      sock?.destroy();
    }
  }
}

function openUdp(host: string, port: number): Promise<dgram.Socket> {
  return new Promise((resolve, reject) => {
    const s = dgram.createSocket(net.isIPv6(host) ? 'udp6' : 'udp4');
    s.once('error', reject);
    s.connect(port, host, () => resolve(s));
  });
}

function udpRequest(s: dgram.Socket, text: string, timeoutMs: number): Promise<{ body: string; peer: string }> {
  return new Promise((resolve, reject) => {
    const done = (err?: Error, v?: { body: string; peer: string }) => {
      clearTimeout(timer);
      s.off('message', onMessage);
      s.off('error', onError);
      if (err) reject(err);
      else resolve(v!);
    };
    const onMessage = (msg: Buffer, rinfo: dgram.RemoteInfo) => done(undefined, { body: msg.toString(), peer: `${rinfo.address}:${rinfo.port}` });
    const onError = (err: Error) => done(err);
    const timer = setTimeout(() => done(coded('ETIMEDOUT')), timeoutMs);
    s.on('message', onMessage);
    s.on('error', onError);
    s.send(text, (err) => err && done(err));
  });
}

async function udpFlow(target: string, fresh: boolean, rep: ClientReport, o: HoldOptions, running: () => boolean): Promise<void> {
  const { host, port } = splitTarget(target);
  let sock: dgram.Socket | undefined;
  let pod: string | undefined;
  for (let i = 0; running(); i++) {
    try {
      sock ??= await openUdp(host, port);
      const { body, peer } = await udpRequest(sock, String(i), o.timeoutMs);
      if (peer !== `${host}:${port}`) throw coded('wrong-peer', `reply from ${peer}, not ${target}`);
      const who = body.trim().split(' ')[0]!;
      if (!fresh && pod !== undefined && who !== pod) throw coded('pod-changed', `${pod} then ${who}`);
      pod = who;
      record(rep, body, peer);
    } catch (err) {
      failed(rep, fresh ? 'udpNew' : 'udp', err);
      sock?.close();
      sock = undefined;
      pod = undefined;
    }
    if (fresh) {
      sock?.close();
      sock = undefined;
    } else {
      await sleep(o.intervalMs);
    }
  }
  sock?.close();
}

async function httpLoop(target: string, rep: ClientReport, o: HoldOptions, running: () => boolean): Promise<void> {
  const { host, port } = splitTarget(target);
  while (running()) {
    try {
      const { body, peer } = await o.httpOnce(host, port, o.timeoutMs);
      record(rep, body, peer);
    } catch (err) {
      failed(rep, 'http', err);
    }
  }
}

export async function runHold(o: HoldOptions): Promise<HoldReport> {
  let stop = false;
  process.once('SIGTERM', () => (stop = true));
  const end = Date.now() + o.durationMs;
  const running = () => !stop && Date.now() < end;
  const kinds: Partial<Record<HoldKind, ClientReport>> = {};
  const runs: Array<Promise<void>> = [];
  const kind = (k: HoldKind) => (kinds[k] ??= emptyReport());
  for (let f = 0; f < o.flows; f++) {
    if (o.echo) runs.push(echoFlow(o.echo, kind('echo'), o, running));
    if (o.udp) runs.push(udpFlow(o.udp, false, kind('udp'), o, running));
  }
  if (o.udp && o.udpNew) runs.push(udpFlow(o.udp, true, kind('udpNew'), o, running));
  if (o.http) runs.push(httpLoop(o.http, kind('http'), o, running));
  await Promise.all(runs);
  const rep: HoldReport = { ...emptyReport(), kinds, examples };
  const add = (to: Record<string, number>, from: Record<string, number>) => {
    for (const [key, n] of Object.entries(from)) to[key] = (to[key] ?? 0) + n;
  };
  for (const k of Object.values(kinds)) {
    rep.ok += k.ok;
    rep.failed += k.failed;
    add(rep.errors, k.errors);
    add(rep.byPod, k.byPod);
    add(rep.peers, k.peers);
  }
  return rep;
}
