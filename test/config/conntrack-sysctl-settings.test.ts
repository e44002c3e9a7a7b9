/**
 * `kpr conntrack-sysctls`' settings, from the agent's arguments: kubeadm's
 * real kube-proxy ConfigMap gives kube-proxy's defaults; a
 * KubeProxyConfiguration's explicit 0 of a pointer field is "leave as is"
 * where null is "the default"; kube-proxy's --conntrack-* flags and kpr's
 * flags of the same meaning are read; precedence is the agent's
 * (kube-proxy's file < kpr's file < the command line), each value naming
 * its source; bad values are errors naming where they came from.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { conntrackSysctlsArgs, type ConntrackSysctlSettings } from '../../agent/config/conntrack-sysctl-settings.js';
import { repoRoot } from '../support/paths.js';

const configMap = YAML.parse(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', 'kubeadm-configmap.yaml'), 'utf8'));
const CONFIG_CONF: string = configMap.data['config.conf'];

function withFiles<T>(files: Record<string, string>, fn: (p: (name: string) => string) => T): T {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-ct-sysctls-'));
  try {
    for (const [name, text] of Object.entries(files)) writeFileSync(path.join(dir, name), text);
    return fn((name) => path.join(dir, name));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const values = (s: ConntrackSysctlSettings) => Object.fromEntries(Object.entries(s).map(([k, v]) => [k, v.value]));
const KUBE_PROXY_DEFAULTS = {
  maxPerCore: 32768,
  min: 131072,
  tcpEstablishedTimeoutS: 86400,
  tcpCloseWaitTimeoutS: 3600,
  tcpBeLiberal: false,
  udpTimeoutS: 0,
  udpStreamTimeoutS: 0,
};
/** kubeadm's config.conf with its conntrack section's lines replaced. */
const withConntrack = (lines: Record<string, string>) =>
  CONFIG_CONF.replace(
    /^conntrack:\n((?: {2}.*\n)+)/m,
    (_, body: string) =>
      `conntrack:\n${body
        .split('\n')
        .filter(Boolean)
        .map((l) => {
          const k = l.trim().split(':')[0];
          return k in lines ? `  ${k}: ${lines[k]}` : l;
        })
        .join('\n')}\n`,
  );

test("kubeadm's ConfigMap and command line: kube-proxy's defaults (null is the default)", () => {
  withFiles({ 'config.conf': CONFIG_CONF }, (p) => {
    const r = conntrackSysctlsArgs([`--config=${p('config.conf')}`, '--hostname-override=node-1']);
    assert.deepEqual(values(r.settings), KUBE_PROXY_DEFAULTS);
    assert.equal(r.settings.maxPerCore.from, "kube-proxy's default");
    assert.equal(r.dryRun, false);
    assert.deepEqual(r.unknown, []);
  });
  assert.deepEqual(values(conntrackSysctlsArgs([]).settings), KUBE_PROXY_DEFAULTS, 'no arguments at all');
});

test("a KubeProxyConfiguration's values, with kube-proxy's meaning of zero, and the file as their source", () => {
  const text = withConntrack({
    maxPerCore: '0',
    min: '0',
    tcpEstablishedTimeout: '0s',
    tcpCloseWaitTimeout: '30m0s',
    tcpBeLiberal: 'true',
    udpTimeout: '45s',
    udpStreamTimeout: '0s',
  });
  assert.match(text, /maxPerCore: 0\n/);
  withFiles({ 'config.conf': text }, (p) => {
    const r = conntrackSysctlsArgs([`--config=${p('config.conf')}`]);
    // maxPerCore/min/tcpEstablishedTimeout 0: left as is (pointer fields); udpStreamTimeout 0s: its default, 0.
    assert.deepEqual(values(r.settings), {
      maxPerCore: 0,
      min: 0,
      tcpEstablishedTimeoutS: 0,
      tcpCloseWaitTimeoutS: 1800,
      tcpBeLiberal: true,
      udpTimeoutS: 45,
      udpStreamTimeoutS: 0,
    });
    assert.equal(r.settings.tcpCloseWaitTimeoutS.from, `${p('config.conf')}: conntrack.tcpCloseWaitTimeout`);
    assert.equal(r.settings.udpStreamTimeoutS.from, "kube-proxy's default");
  });
});

test("precedence: kube-proxy's file < kpr's file < the command line, in any order of --config; kube-proxy's flag spellings", () => {
  const kp = withConntrack({ maxPerCore: '65536', min: '200000', tcpEstablishedTimeout: '2h0m0s', udpTimeout: '10s' });
  withFiles({ 'config.conf': kp, 'kpr.yaml': 'conntrack-min: 300000\nct-udp-timeout: 20s\nsync-period: 1m\n' }, (p) => {
    for (const order of [
      [p('config.conf'), p('kpr.yaml')],
      [p('kpr.yaml'), p('config.conf')],
    ]) {
      const r = conntrackSysctlsArgs([
        ...order.map((f) => `--config=${f}`),
        '--conntrack-tcp-timeout-established=3h',
        '--conntrack-tcp-be-liberal',
        '--conntrack-udp-timeout-stream',
        '2m',
        '--dry-run',
      ]);
      assert.deepEqual(values(r.settings), {
        maxPerCore: 65536,
        min: 300000,
        tcpEstablishedTimeoutS: 10800,
        tcpCloseWaitTimeoutS: 3600,
        tcpBeLiberal: true,
        udpTimeoutS: 20,
        udpStreamTimeoutS: 120,
      });
      assert.equal(r.settings.maxPerCore.from, `${p('config.conf')}: conntrack.maxPerCore`);
      assert.equal(r.settings.min.from, `${p('kpr.yaml')}: conntrack-min`);
      assert.equal(r.settings.tcpEstablishedTimeoutS.from, 'command line --ct-tcp-timeout');
      assert.equal(r.dryRun, true);
    }
    const flags = conntrackSysctlsArgs([
      `--config=${p('config.conf')}`,
      '--conntrack-max-per-core=0',
      '--conntrack-tcp-be-liberal=false',
      '--conntrack-tcp-timeout-close-wait',
      '0s',
    ]);
    assert.deepEqual([flags.settings.maxPerCore.value, flags.settings.tcpBeLiberal.value, flags.settings.tcpCloseWaitTimeoutS.value], [0, false, 0]);
  });
});

test('an unknown kube-proxy field is decoded leniently and named; bad values are errors naming their source', () => {
  withFiles({ 'config.conf': `${CONFIG_CONF}\nnewKubeProxyField: 1\n`, 'bad.conf': withConntrack({ maxPerCore: '-1' }) }, (p) => {
    const r = conntrackSysctlsArgs([`--config=${p('config.conf')}`]);
    assert.deepEqual(r.unknown, [{ file: p('config.conf'), fields: ['newKubeProxyField'] }]);
    assert.throws(() => conntrackSysctlsArgs([`--config=${p('bad.conf')}`]), /conntrack\.maxPerCore: "-1" is not a whole number/);
  });
  assert.throws(() => conntrackSysctlsArgs(['--conntrack-min', 'lots']), /command line --conntrack-min: "lots" is not a whole number/);
  assert.throws(() => conntrackSysctlsArgs(['--conntrack-tcp-timeout-close-wait=1d']), /unknown unit "d"/);
  assert.throws(() => conntrackSysctlsArgs(['--conntrack-tcp-be-liberal=yes']), /"yes" is not true or false/);
  assert.throws(() => conntrackSysctlsArgs(['--no-such-flag']), /Unknown option '--no-such-flag'/);
});
