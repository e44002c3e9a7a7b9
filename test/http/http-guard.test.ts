/**
 * The listener guard (agent/http/http-guard.ts) on real sockets: a flood of idle
 * connections cannot hold more than the cap, the oldest idle one makes room
 * for a new request, idle and slow (slowloris) connections are closed on
 * their deadlines, and a newcomer is refused only when every socket is busy;
 * a request whose body never arrives is answered at once and its connection
 * closed, and such a connection makes room at the cap even mid-handler.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { guardedFastify, type ListenerLimits } from '../../agent/http/http-guard.js';

const LIMITS: ListenerLimits = { maxConnections: 5, idleTimeoutMs: 400, headersTimeoutMs: 600, requestTimeoutMs: 2000, keepAliveTimeoutMs: 300 };

async function serve(limits: ListenerLimits, handler?: () => Promise<void>) {
  const shed: string[] = [];
  const app = guardedFastify(limits, (k) => shed.push(k));
  app.get('/ping', async () => {
    await handler?.();
    return 'pong';
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as net.AddressInfo).port;
  return { app, port, shed };
}

function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => resolve(s));
    s.on('error', reject);
  });
}

function get(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => s.write('GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    let data = '';
    s.on('data', (d) => (data += d));
    s.on('end', () => resolve(data));
    s.on('error', reject);
    s.setTimeout(3000, () => reject(new Error('no answer within 3 s')));
  });
}

/** Resolves when the socket closes, however (an EPIPE on the way is part of being closed). */
const closed = (s: net.Socket) => (s.destroyed ? Promise.resolve() : new Promise<void>((r) => s.once('close', () => r())));

/** Polls `cond` (the server counts a connection when its side has closed, which may be just after the client saw it). */
async function until(what: string, cond: () => boolean, ms = 2000): Promise<void> {
  for (const end = Date.now() + ms; !cond(); await new Promise((r) => setTimeout(r, 10))) if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
}

test('a flood of idle connections holds at most the cap, and a request still gets its answer', async () => {
  const { app, port, shed } = await serve({ ...LIMITS, idleTimeoutMs: 60_000, headersTimeoutMs: 60_000 });
  const flood: net.Socket[] = [];
  try {
    for (let i = 0; i < 50; i++) {
      const s = await connect(port);
      s.on('error', () => {});
      flood.push(s);
    }
    await new Promise((r) => setTimeout(r, 100));
    assert.ok(app.connectionGuard.open() <= LIMITS.maxConnections, `${app.connectionGuard.open()} open`);
    assert.match(await get(port), /^HTTP\/1\.1 200 .*pong$/s);
    assert.ok(app.connectionGuard.evicted >= 45, `${app.connectionGuard.evicted} evicted`);
    assert.equal(app.connectionGuard.refused, 0);
    assert.ok(shed.every((k) => k === 'evicted') && shed.length === app.connectionGuard.evicted);
    const alive = flood.filter((s) => !s.destroyed && s.readyState === 'open');
    assert.ok(alive.length <= LIMITS.maxConnections, `${alive.length} flood sockets still open on the client side`);
  } finally {
    for (const s of flood) s.destroy();
    await app.close();
  }
});

test('an idle connection is closed after the idle timeout; a slowloris one after the header deadline', async () => {
  const { app, port } = await serve(LIMITS);
  try {
    const idle = await connect(port);
    idle.on('error', () => {});
    const t0 = Date.now();
    await closed(idle);
    const idleMs = Date.now() - t0;
    assert.ok(idleMs >= 300 && idleMs < 3000, `idle closed after ${idleMs} ms`);

    const slow = await connect(port);
    slow.on('error', () => {});
    const t1 = Date.now();
    // One header byte every 150 ms: never idle long enough for the idle timeout.
    const drip = setInterval(() => !slow.destroyed && slow.write('X'), 150);
    slow.write('GET /ping HTTP/1.1\r\nHost: x\r\n');
    await closed(slow);
    clearInterval(drip);
    const slowMs = Date.now() - t1;
    assert.ok(slowMs < 4000, `slowloris closed after ${slowMs} ms`);
  } finally {
    await app.close();
  }
});

test('when every connection is busy the newcomer is refused, and counted', async () => {
  let release: () => void = () => {};
  const gate = new Promise<void>((r) => (release = r));
  let entered = 0;
  const { app, port, shed } = await serve({ ...LIMITS, maxConnections: 2, requestTimeoutMs: 10_000, idleTimeoutMs: 10_000 }, () => {
    entered++;
    return gate;
  });
  try {
    const a = get(port);
    const b = get(port);
    await until('both requests in their handler', () => entered === 2);
    const c = await get(port).then(
      (d) => d,
      (e: Error) => `error: ${e.message}`,
    );
    assert.equal(c, '', 'refused: closed without an answer');
    assert.equal(app.connectionGuard.refused, 1);
    assert.deepEqual(shed, ['refused']);
    release();
    assert.match(await a, /pong$/);
    assert.match(await b, /pong$/);
  } finally {
    release();
    await app.close();
  }
});

/** Sends `raw` on a fresh connection; resolves with what came back and how long until the server closed it. */
function exchange(port: number, raw: string, timeoutMs = 3000): Promise<{ data: string; closedAfterMs: number }> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const s = net.connect(port, '127.0.0.1', () => s.write(raw));
    let data = '';
    s.setEncoding('latin1');
    s.on('data', (d: string) => (data += d));
    s.on('error', () => {});
    s.on('close', () => resolve({ data, closedAfterMs: Date.now() - t0 }));
    s.setTimeout(timeoutMs, () => {
      s.destroy();
      reject(new Error(`not closed within ${timeoutMs} ms; got ${JSON.stringify(data)}`));
    });
  });
}

const SLOW_POST = 'POST /ping HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\nx';

test('a request whose body never arrives is answered at once, without reading it, and its connection closed; counted as unread_body', async () => {
  const shed: string[] = [];
  const app = guardedFastify({ ...LIMITS, idleTimeoutMs: 60_000, headersTimeoutMs: 60_000, requestTimeoutMs: 60_000 }, (k) => shed.push(k));
  app.all('/ping', async () => 'pong');
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as net.AddressInfo).port;
  try {
    const r = await exchange(port, SLOW_POST);
    assert.match(r.data, /^HTTP\/1\.1 200 /);
    assert.match(r.data, /\r\nconnection: close\r\n/i);
    assert.match(r.data, /pong$/);
    assert.ok(r.closedAfterMs < 1000, `closed after ${r.closedAfterMs} ms (the deadlines are 60 s)`);
    await until('the unread body counted', () => shed.length > 0);
    assert.deepEqual(shed, ['unread_body']);
    assert.equal(app.connectionGuard.unreadBody, 1);

    // Any content type, and a chunked body that never ends, are answered the same way.
    const chunked = await exchange(port, 'PUT /ping HTTP/1.1\r\nHost: x\r\nContent-Type: x-kpr/unknown\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n');
    assert.match(chunked.data, /^HTTP\/1\.1 200 .*pong$/s);
    await until('the chunked body counted', () => app.connectionGuard.unreadBody === 2);

    // A request without a body keeps its connection (keep-alive), and a complete body is no unread one.
    const keep = await new Promise<string>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => s.write('GET /ping HTTP/1.1\r\nHost: x\r\n\r\n'));
      s.setEncoding('latin1');
      s.on('data', (d: string) => {
        if (d.endsWith('pong')) {
          resolve(d);
          s.destroy();
        }
      });
    });
    assert.doesNotMatch(keep, /connection: close/i);
    const whole = await exchange(port, 'POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}');
    assert.match(whole.data, /connection: close\r\n.*pong$/is);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(app.connectionGuard.unreadBody, 2, 'a body that arrived whole is not counted');
  } finally {
    await app.close();
  }
});

test('at the cap, a connection whose request body is still arriving makes room for a probe, even while its handler runs', async () => {
  let release: () => void = () => {};
  const gate = new Promise<void>((r) => (release = r));
  const shed: string[] = [];
  const app = guardedFastify({ ...LIMITS, maxConnections: 2, idleTimeoutMs: 60_000, headersTimeoutMs: 60_000, requestTimeoutMs: 60_000 }, (k) => shed.push(k));
  app.post('/ping', async () => {
    await gate; // a handler still running: only the unfinished body makes the socket evictable
    return 'pong';
  });
  app.get('/ping', async () => 'pong');
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as net.AddressInfo).port;
  const slow: net.Socket[] = [];
  try {
    for (let i = 0; i < 2; i++) {
      const s = await connect(port);
      s.on('error', () => {});
      s.write(SLOW_POST);
      slow.push(s);
    }
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(app.connectionGuard.open(), 2);
    assert.match(await get(port), /^HTTP\/1\.1 200 .*pong$/s);
    assert.equal(app.connectionGuard.refused, 0);
    assert.deepEqual(shed, ['unread_body'], 'the oldest slow-body connection was closed for the probe');
    await closed(slow[0]);
    assert.ok(!slow[1].destroyed, 'the newer one kept its place');
  } finally {
    release();
    for (const s of slow) s.destroy();
    await app.close();
  }
});
