/**
 * agent/k8s/kubeconfig.ts: a user's `tokenFile` (client-go's spelling, as in
 * kubeadm's kube-proxy kubeconfig.conf) becomes the bearer token of every
 * request, read from the file (a relative path from the kubeconfig's
 * directory), and a token written in the kubeconfig itself still wins.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadKubeConfig } from '../../agent/k8s/kubeconfig.js';

function kubeconfig(user: Record<string, unknown>): string {
  return `apiVersion: v1
kind: Config
clusters:
- cluster:
    server: https://198.18.0.2:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
users:
- name: default
  user: ${JSON.stringify(user)}
`;
}

async function authorization(file: string, serviceHost?: string): Promise<string | undefined> {
  const kc = loadKubeConfig({ kubeconfig: file, serviceHost });
  const opts = await kc.applyToFetchOptions({});
  return (opts.headers as { get(name: string): string | null }).get('authorization') ?? undefined;
}

test("tokenFile: the file's token is sent (relative to the kubeconfig), also with the server host overridden", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-kubeconfig-'));
  try {
    writeFileSync(path.join(dir, 'token'), 'from-the-file');
    writeFileSync(path.join(dir, 'relative.conf'), kubeconfig({ tokenFile: 'token' }));
    writeFileSync(path.join(dir, 'absolute.conf'), kubeconfig({ tokenFile: path.join(dir, 'token') }));
    writeFileSync(path.join(dir, 'inline.conf'), kubeconfig({ token: 'inline', tokenFile: path.join(dir, 'token') }));
    writeFileSync(path.join(dir, 'none.conf'), kubeconfig({}));
    assert.equal(await authorization(path.join(dir, 'relative.conf')), 'Bearer from-the-file');
    assert.equal(await authorization(path.join(dir, 'absolute.conf'), '198.18.0.3'), 'Bearer from-the-file');
    assert.equal(
      loadKubeConfig({ kubeconfig: path.join(dir, 'absolute.conf'), serviceHost: '198.18.0.3' }).getCurrentCluster()?.server,
      'https://198.18.0.3:6443',
    );
    assert.equal(await authorization(path.join(dir, 'inline.conf')), 'Bearer inline');
    assert.equal(await authorization(path.join(dir, 'none.conf')), undefined);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
