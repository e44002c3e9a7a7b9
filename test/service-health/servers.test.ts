/**
 * healthCheckNodePort servers: kube-proxy's answers (status, headers, exact
 * body), opened inside a node namespace, following services and counts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ServiceHealthServers } from '../../agent/service-health/servers.js';
import { serviceHealthAnswer } from '../../agent/service-health/body.js';
import { silentLogger } from '../../agent/log/log.js';
import { Sandbox, nsPath } from '../../sandbox/netns.js';
import { requireRoot } from '../support/preflight.js';

/** GET from inside the namespace (the servers are not reachable from the test's own); async, since the servers run in this process. */
async function getIn(ns: string, port: number, path = '/'): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  const script = `fetch('http://127.0.0.1:${port}${path}',{method:'GET'}).then(async r=>{const h={};r.headers.forEach((v,k)=>h[k]=v);process.stdout.write(JSON.stringify({status:r.status,headers:h,body:await r.text()}))}).catch(e=>{process.stdout.write(JSON.stringify({status:0,headers:{},body:String(e.cause?.code??e)}))})`;
  const { stdout } = await promisify(execFile)('nsenter', [`--net=${nsPath(ns)}`, process.execPath, '-e', script], { encoding: 'utf8', timeout: 10_000 });
  return JSON.parse(stdout);
}

test("the body is kube-proxy's, byte for byte", () => {
  const a = serviceHealthAnswer('ns-a', 'web', 2, true);
  assert.equal(a.status, 200);
  assert.equal(a.body, '{\n\t"service": {\n\t\t"namespace": "ns-a",\n\t\t"name": "web"\n\t},\n\t"localEndpoints": 2,\n\t"serviceProxyHealthy": true\n}');
  assert.equal(serviceHealthAnswer('ns-a', 'web', 0, true).status, 503);
  assert.equal(serviceHealthAnswer('ns-a', 'web', 3, false).status, 503);
  assert.equal(serviceHealthAnswer('ns-a', 'web', 3, false).headers['X-Load-Balancing-Endpoint-Weight'], '3');
});

test('servers open in the node namespace, answer 200/503 as counts change, and close with their service', async () => {
  requireRoot();
  const sb = new Sandbox();
  let healthy = true;
  const servers = new ServiceHealthServers({ netns: undefined, proxyHealthy: () => healthy, log: silentLogger });
  try {
    const ns = sb.addNamespace('hc');
    const inNode = new ServiceHealthServers({ netns: nsPath(ns), proxyHealthy: () => healthy, log: silentLogger });
    try {
      await inNode.sync([{ service: 'demo/web', port: 31001, localEndpoints: 2 }]);
      const ok = await getIn(ns, 31001, '/any/path');
      assert.equal(ok.status, 200);
      assert.equal(ok.headers['content-type'], 'application/json');
      assert.equal(ok.headers['x-content-type-options'], 'nosniff');
      assert.equal(ok.headers['x-load-balancing-endpoint-weight'], '2');
      assert.deepEqual(JSON.parse(ok.body), { service: { namespace: 'demo', name: 'web' }, localEndpoints: 2, serviceProxyHealthy: true });

      await inNode.sync([{ service: 'demo/web', port: 31001, localEndpoints: 0 }]);
      assert.equal((await getIn(ns, 31001)).status, 503);
      await inNode.sync([{ service: 'demo/web', port: 31001, localEndpoints: 1 }]);
      healthy = false;
      const sick = await getIn(ns, 31001);
      assert.equal(sick.status, 503);
      assert.equal(JSON.parse(sick.body).serviceProxyHealthy, false);
      healthy = true;

      await inNode.sync([{ service: 'demo/web', port: 31002, localEndpoints: 1 }]);
      assert.equal((await getIn(ns, 31001)).status, 0, 'the old port closed when the port changed');
      assert.equal((await getIn(ns, 31002)).status, 200);
      await inNode.sync([]);
      assert.equal((await getIn(ns, 31002)).status, 0, 'closed with its service');
    } finally {
      await inNode.close();
    }
  } finally {
    await servers.close();
    await sb.teardown();
  }
});

test('overlapping syncs apply in order and the last one wins; close() waits for a server being opened', async () => {
  requireRoot();
  const sb = new Sandbox();
  const warnings: string[] = [];
  const log = { ...silentLogger, warn: (msg: string, f?: Record<string, unknown>) => void warnings.push(`${msg} ${JSON.stringify(f)}`), child: () => log };
  try {
    const ns = sb.addNamespace('hc2');
    const servers = new ServiceHealthServers({ netns: nsPath(ns), proxyHealthy: () => true, log });
    const x = { service: 'demo/x', port: 31003, localEndpoints: 1 };
    const y = { service: 'demo/y', port: 31004, localEndpoints: 1 };
    try {
      // The first apply is under way (opening x) when the next two arrive; the last of them is what stays.
      const first = servers.sync([x]);
      for (let i = 0; i < 5; i++) await Promise.resolve();
      const second = servers.sync([x, y]);
      const third = servers.sync([y]);
      await Promise.all([first, second, third]);
      assert.deepEqual([...servers.ports()], [['demo/y', 31004]]);
      assert.equal((await getIn(ns, 31003)).status, 0, "x's server is closed");
      assert.equal((await getIn(ns, 31004)).status, 200);
      assert.deepEqual(warnings, [], 'no server was opened twice');

      // A Service whose server is still being opened when the agent stops: closed too.
      const opening = servers.sync([y, { service: 'demo/z', port: 31005, localEndpoints: 1 }]);
      await servers.close();
      await opening;
      assert.equal((await getIn(ns, 31005)).status, 0, "z's server is closed");
      assert.equal((await getIn(ns, 31004)).status, 0, "y's server is closed");
      assert.deepEqual(warnings, []);
    } finally {
      await servers.close();
    }
  } finally {
    await sb.teardown();
  }
});
