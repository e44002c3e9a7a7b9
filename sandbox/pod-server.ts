/**
 * A pod's workload in the sandbox: an HTTP server, a UDP server and a TCP
 * line echo server that all answer with the pod's name, so a client can
 * tell which backend it reached (the echo server keeps its connections, for
 * long-lived flows). As agnhost netexec does, GET /echo?msg=M and a UDP
 * datagram "echo M" answer M itself (large-request checks). Run inside the
 * pod's namespace:
 *   node pod-server.js --name pod-a [--http-port 8080] [--udp-port 5353] [--echo-port 7070]
 * Prints "ready" once every socket listens.
 */
import http from 'node:http';
import dgram from 'node:dgram';
import net from 'node:net';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    name: { type: 'string' },
    'http-port': { type: 'string', default: '8080' },
    'udp-port': { type: 'string', default: '5353' },
    'echo-port': { type: 'string', default: '7070' },
    // "::" with IPv6 enabled accepts IPv4 too (IPv4-mapped), so one socket serves both families.
    host: { type: 'string', default: '::' },
  },
});
const name = values.name ?? 'pod';

/** IPv4 clients of a dual-stack socket appear as ::ffff:a.b.c.d; report them as kube-proxy users would see them. */
const plain = (a: string | undefined) => (a ?? '').replace(/^::ffff:/, '');

const server = http.createServer((req, res) => {
  if (req.url?.startsWith('/echo?')) {
    res.writeHead(200, { 'content-type': 'text/plain', connection: 'close' });
    res.end(new URL(req.url, 'http://pod').searchParams.get('msg') ?? '');
    return;
  }
  // The client address lets tests check what the backend saw (SNAT or not).
  const body = `${name} ${plain(req.socket.remoteAddress)}\n`;
  res.writeHead(200, { 'content-type': 'text/plain', connection: 'close' });
  res.end(body);
});
server.keepAliveTimeout = 0;

const udp = dgram.createSocket({ type: values.host!.includes(':') ? 'udp6' : 'udp4', ipv6Only: false });
udp.on('message', (msg, rinfo) => {
  if (msg.subarray(0, 5).toString() === 'echo ') {
    udp.send(msg.subarray(5), rinfo.port, rinfo.address);
    return;
  }
  udp.send(`${name} ${plain(rinfo.address)}\n`, rinfo.port, rinfo.address);
});

/** Each line a client sends comes back as "<pod> <line>". */
const echo = net.createServer((sock) => {
  let buf = '';
  sock.setEncoding('utf8');
  sock.on('data', (d) => {
    buf += d;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      sock.write(`${name} ${buf.slice(0, i)}\n`);
      buf = buf.slice(i + 1);
    }
  });
  sock.on('error', () => sock.destroy());
});

let listening = 0;
const ready = () => {
  if (++listening === 3) process.stdout.write('ready\n');
};
server.listen(Number(values['http-port']), values.host, ready);
udp.bind(Number(values['udp-port']), values.host, ready);
echo.listen(Number(values['echo-port']), values.host, ready);

const stop = () => {
  server.close();
  echo.close();
  udp.close();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
