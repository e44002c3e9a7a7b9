import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { ListError, listPage, listUrl } from '../../agent/k8s/list-page.js';

/** A one-route HTTP server answering `answer(url)`; records the requests it saw. */
async function server(
  answer: (url: URL, req: http.IncomingMessage) => { status: number; body: string },
): Promise<{ url: string; seen: Array<{ url: URL; auth?: string }>; close(): Promise<void> }> {
  const seen: Array<{ url: URL; auth?: string }> = [];
  const srv = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    seen.push({ url, auth: req.headers.authorization });
    const a = answer(url, req);
    res.writeHead(a.status, { 'content-type': 'application/json' });
    res.end(a.body);
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, seen, close: () => new Promise<void>((r) => srv.close(() => r())) };
}

function kubeConfig(server: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server, skipTLSVerify: true }],
    users: [{ name: 'u', token: 'secret-token' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}

describe('listPage: one page of a list through the kubeconfig', () => {
  test('selectors, limit and continue go in the query; the token in the header; metadata.continue is exposed as _continue', async () => {
    const s = await server(() => ({
      status: 200,
      body: JSON.stringify({ kind: 'ServiceList', metadata: { resourceVersion: '42', continue: 'tok2' }, items: [{ metadata: { name: 'a' } }] }),
    }));
    try {
      const l = await listPage(kubeConfig(s.url), '/api/v1/services', {
        labelSelector: '!x',
        fieldSelector: 'spec.clusterIP!=None',
        limit: 100,
        continue: 'tok1',
      });
      assert.equal(l.items.length, 1);
      assert.equal(l.metadata?.resourceVersion, '42');
      assert.equal((l.metadata as { _continue?: string })._continue, 'tok2');
      const q = s.seen[0].url.searchParams;
      assert.deepEqual(
        [s.seen[0].url.pathname, q.get('labelSelector'), q.get('fieldSelector'), q.get('limit'), q.get('continue')],
        ['/api/v1/services', '!x', 'spec.clusterIP!=None', '100', 'tok1'],
      );
      assert.equal(s.seen[0].auth, 'Bearer secret-token');
    } finally {
      await s.close();
    }
  });

  test('a non-200 answer is a ListError with the status as code and the Status message', async () => {
    const s = await server(() => ({
      status: 410,
      body: JSON.stringify({ kind: 'Status', status: 'Failure', reason: 'Expired', code: 410, message: 'The provided continue parameter is too old' }),
    }));
    try {
      await assert.rejects(listPage(kubeConfig(s.url), '/apis/discovery.k8s.io/v1/endpointslices', { limit: 5, continue: 'old' }), (e: unknown) => {
        assert.ok(e instanceof ListError);
        assert.equal(e.code, 410);
        assert.equal(e.statusCode, 410);
        assert.match(e.message, /HTTP 410: The provided continue parameter is too old/);
        return true;
      });
    } finally {
      await s.close();
    }
  });

  test('an answer without items is an error, not an empty list', async () => {
    const s = await server(() => ({ status: 200, body: '{"kind":"Status"}' }));
    try {
      await assert.rejects(listPage(kubeConfig(s.url), '/api/v1/nodes', {}), /no items array/);
    } finally {
      await s.close();
    }
  });

  test('the server URL may carry a path prefix and a trailing slash', () => {
    assert.equal(
      listUrl('https://h:6443/prefix/', '/api/v1/nodes', { fieldSelector: 'metadata.name=n' }).toString(),
      'https://h:6443/prefix/api/v1/nodes?fieldSelector=metadata.name%3Dn',
    );
  });
});
