/**
 * A slow-body flood with a prober beside it, as an attacker and a kubelet
 * would meet on one port: `connections` sockets each send `POST <path>` with
 * `Content-Length: 60000` and one body byte, then wait; a socket the server
 * closes is reopened, at most `opensPerSecond` reopens a second (the
 * attacker of issue 36 managed ~31/s: enough to hold every connection of a
 * server that keeps a request open until its 10 s deadline). Meanwhile `probes` GETs of `probePath`,
 * one every `intervalMs`, each on a fresh connection and given `timeoutMs`
 * (a kubelet probe's timeout). Bounded in time: the flood stops after the
 * last probe. Used in-process (listeners on the test's loopback) and by the
 * sandbox client's `slowbody` mode (inside a node namespace).
 */
import net from 'node:net';

export interface SlowBodyOptions {
  host: string;
  port: number;
  /** The flood's request path (e.g. /healthz). */
  path: string;
  connections: number;
  opensPerSecond: number;
  probePath: string;
  probes: number;
  intervalMs: number;
  timeoutMs: number;
}

export interface SlowBodyReport {
  probes: number;
  /** Probes answered 200 within their timeout. */
  answered: number;
  /** Probe outcomes: the HTTP status, or the error code. */
  outcomes: Record<string, number>;
  /** Flood connections opened, and how many of them got an HTTP answer before closing. */
  floodOpened: number;
  floodAnswered: number;
  /** The slowest answered probe. */
  maxProbeMs: number;
}

const FLOOD_REQUEST = (path: string) => `POST ${path} HTTP/1.1\r\nHost: kpr\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\nx`;

/** One GET on a fresh connection: the status (0 if none) and why not, within `timeoutMs`. */
function probe(host: string, port: number, path: string, timeoutMs: number): Promise<{ status: number; error?: string; ms: number }> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    let data = '';
    let done = false;
    const finish = (error?: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(data)?.[1] ?? 0);
      resolve({ status, ...(status ? {} : { error: error ?? 'closed without an answer' }), ms: Date.now() - t0 });
    };
    const sock = net.connect(port, host, () => sock.write(`GET ${path} HTTP/1.1\r\nHost: kpr\r\nConnection: close\r\n\r\n`));
    const timer = setTimeout(() => finish('timeout'), timeoutMs);
    sock.setEncoding('latin1');
    sock.on('data', (d: string) => {
      data += d;
      if (/\r\n\r\n/.test(data)) finish(); // the status line and headers are the answer
    });
    sock.on('error', (err: NodeJS.ErrnoException) => finish(err.code ?? err.message));
    sock.on('close', () => finish());
  });
}

export async function slowBodyFlood(o: SlowBodyOptions): Promise<SlowBodyReport> {
  const rep: SlowBodyReport = { probes: 0, answered: 0, outcomes: {}, floodOpened: 0, floodAnswered: 0, maxProbeMs: 0 };
  let running = true;
  const open = new Set<net.Socket>();
  /** Closed slots waiting for their reopen, and the reopen budget (a token bucket filled every tick). */
  let waiting = 0;
  let tokens = 0;
  const TICK_MS = 50;
  const refill = setInterval(() => {
    tokens = Math.min(o.opensPerSecond, tokens + (o.opensPerSecond * TICK_MS) / 1000);
    for (; waiting > 0 && tokens >= 1; waiting--, tokens--) slot();
  }, TICK_MS);
  const slot = () => {
    if (!running) return;
    rep.floodOpened++;
    const s = net.connect(o.port, o.host, () => s.write(FLOOD_REQUEST(o.path)));
    open.add(s);
    let answered = false;
    s.on('data', () => {
      if (!answered) rep.floodAnswered++;
      answered = true;
    });
    s.on('error', () => {});
    s.on('close', () => {
      open.delete(s);
      if (running) waiting++;
    });
  };
  // Open the flood in waves of 32, so it holds its connections before the first probe.
  for (let i = 0; i < o.connections; i += 32) {
    for (let j = i; j < Math.min(o.connections, i + 32); j++) slot();
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 500));
  try {
    for (let i = 0; i < o.probes; i++) {
      const started = Date.now();
      const r = await probe(o.host, o.port, o.probePath, o.timeoutMs);
      rep.probes++;
      const key = r.status ? String(r.status) : r.error!;
      rep.outcomes[key] = (rep.outcomes[key] ?? 0) + 1;
      if (r.status === 200) {
        rep.answered++;
        rep.maxProbeMs = Math.max(rep.maxProbeMs, r.ms);
      }
      const wait = o.intervalMs - (Date.now() - started);
      if (wait > 0) await new Promise((res) => setTimeout(res, wait));
    }
  } finally {
    running = false;
    clearInterval(refill);
    for (const s of open) s.destroy();
  }
  return rep;
}
