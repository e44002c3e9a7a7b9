/**
 * charts/kpr's values.schema.json, by the real helm: k8sServiceHost is a bare
 * host (a port or a scheme is refused, naming the value, rather than the
 * agent failing on every node, and the NOTES' "k8sServiceHost is not set"
 * warning is not silenced by a bad value); the config durations take Go
 * durations, as the agent does; bind addresses are IP:port as the agent
 * reads them; Prometheus durations; closed objects (probes, updateStrategy,
 * affinity, ...); a metrics Service never on a loopback address; one way to
 * the API server. Each refusal names the value.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { parseBindAddress } from '../../agent/net/listen-address.js';
import { helm } from './helm.js';
import { CHART } from './render.js';

const schema = JSON.parse(readFileSync(path.join(CHART, 'values.schema.json'), 'utf8'));
const template = (...set: string[]) => helm('template', 'kpr', CHART, '--namespace', 'kube-system', ...set.flatMap((s) => ['--set-string', s]));

describe('charts/kpr values validation with the real helm', () => {
  test('k8sServiceHost with a port or a scheme is refused, naming k8sServiceHost', () => {
    for (const bad of ['1.2.3.4:6443', 'https://x', 'https://198.18.0.2:6443', 'api.example.com:6443', '[2001:db8::2]:6443']) {
      const r = template(`k8sServiceHost=${bad}`);
      assert.notEqual(r.status, 0, `${bad} was accepted`);
      assert.match(r.stderr, /k8sServiceHost/, r.stderr);
      const install = helm('install', 'kpr', CHART, '--dry-run=client', '--namespace', 'kube-system', '--set-string', `k8sServiceHost=${bad}`);
      assert.notEqual(install.status, 0, `install with ${bad}: no NOTES claiming it is set`);
      assert.doesNotMatch(install.stdout, /kpr .* is installed/);
    }
  });

  test('a bare IPv4, IPv6 or DNS k8sServiceHost renders into the agent args', () => {
    for (const good of ['198.18.0.2', '2001:db8::2', 'api.example.com']) {
      const r = template(`k8sServiceHost=${good}`);
      assert.equal(r.status, 0, r.stderr);
      assert.ok(r.stdout.includes(`- --k8s-service-host=${good}`), good);
    }
  });

  test('config durations take Go durations (1m30s, 24h0m0s, 300ms) and bare seconds; a typo is refused', () => {
    const r = template(
      'config.sync-period=1m30s',
      'config.min-sync-period=300ms',
      'config.ct-tcp-timeout=24h0m0s',
      'config.ct-udp-timeout=30',
      'config.ct-sweep-interval=1.5s',
    );
    assert.equal(r.status, 0, r.stderr);
    for (const want of ['sync-period: 1m30s', 'min-sync-period: 300ms', 'ct-tcp-timeout: 24h0m0s', 'ct-sweep-interval: 1.5s'])
      assert.ok(r.stdout.includes(want), want);
    for (const bad of ['1d', '-1s', '5 s', 's']) {
      const b = template(`config.sync-period=${bad}`);
      assert.notEqual(b.status, 0, `${bad} was accepted`);
      assert.match(b.stderr, /sync-period/);
    }
  });
});

/** `helm template` with these values (a YAML document), by the real helm. */
function templateWith(values: Record<string, unknown>) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-values-'));
  try {
    writeFileSync(path.join(dir, 'values.yaml'), YAML.stringify(values));
    return helm('template', 'kpr', CHART, '--namespace', 'kube-system', '-f', path.join(dir, 'values.yaml'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function refused(values: Record<string, unknown>, names: RegExp): void {
  const r = templateWith(values);
  assert.notEqual(r.status, 0, `accepted: ${JSON.stringify(values)}`);
  assert.match(r.stderr, names, `${JSON.stringify(values)}: ${r.stderr}`);
}

function accepted(values: Record<string, unknown>): string {
  const r = templateWith(values);
  assert.equal(r.status, 0, `${JSON.stringify(values)}: ${r.stderr}`);
  return r.stdout;
}

const BAD_BIND = [
  '999.1.1.1:99999',
  '999.1.1.1:10256',
  '1.2.3.4:99999',
  '1.2.3.4:65536',
  '1.2.3.4:0',
  '1.2.3.4',
  '1.2.3.4:',
  ':10256',
  '01.2.3.4:80',
  '1.2.3:80',
  'localhost:10256',
  '::1:10256',
  '[::1]',
  '[1.2.3.4]:80',
  '[::g]:80',
  '[2001:db8:::1]:80',
  'http://0.0.0.0:10256',
  '0.0.0.0:10256 ',
  '',
];
const GOOD_BIND = [
  '0.0.0.0:10256',
  '127.0.0.1:10256',
  '198.18.0.2:1',
  '255.255.255.255:65535',
  '[::]:10256',
  '[::1]:10256',
  '[2001:db8::2]:10256',
  '[2001:db8:0:0:0:0:0:2]:80',
  '[::ffff:198.18.0.2]:80',
  '[fe80::1:2:3:4]:80',
];

describe('charts/kpr closes what the schema let through', () => {
  test('bind addresses: an invalid IP, a port outside 1-65535, a name or a missing part is refused; the schema agrees with the agent', () => {
    const pattern = new RegExp(schema.definitions.bindAddress.pattern);
    for (const a of BAD_BIND) {
      assert.equal(pattern.test(a), false, `schema accepts ${JSON.stringify(a)}`);
      const agentTakes = (() => {
        try {
          return parseBindAddress(a, '--healthz-bind-address') !== undefined && !a.endsWith(':0');
        } catch {
          return false;
        }
      })();
      assert.equal(agentTakes, false, `the agent takes ${JSON.stringify(a)} that the chart refuses`);
    }
    for (const a of GOOD_BIND) {
      assert.ok(pattern.test(a), `schema refuses ${a}`);
      assert.ok(parseBindAddress(a, '--healthz-bind-address'), a);
    }
    for (const key of ['healthz-bind-address', 'metrics-bind-address']) {
      for (const bad of ['999.1.1.1:99999', '1.2.3.4:0', 'localhost:10256', '::1:10256']) refused({ config: { [key]: bad } }, new RegExp(key));
      accepted({ config: { [key]: '[2001:db8::2]:20256' } });
    }
    refused({ config: { 'healthz-bind-address': '' } }, /healthz-bind-address/);
    refused({ config: { 'healthz-bind-address': null } }, /healthz-bind-address/);
    accepted({ config: { 'metrics-bind-address': '' } });
    accepted({ config: { 'metrics-bind-address': null } });
  });

  test('metrics Service, ServiceMonitor or PodMonitor with a loopback, unset or disabled metrics address is refused', () => {
    for (const metrics of [{ service: { enabled: true } }, { serviceMonitor: { enabled: true } }, { podMonitor: { enabled: true } }]) {
      for (const bad of [
        '127.0.0.1:10249',
        '127.9.9.9:10249',
        '[::1]:10249',
        '[0:0:0:0:0:0:0:1]:10249',
        '[::0001]:10249',
        '[::ffff:127.0.0.1]:10249',
        null,
        '',
      ]) {
        refused({ metrics, config: { 'metrics-bind-address': bad } }, /metrics-bind-address/);
      }
      for (const good of ['0.0.0.0:10249', '[::]:10249', '198.18.0.2:10249', '[2001:db8::1]:10249', '[::10]:10249'])
        accepted({ metrics, config: { 'metrics-bind-address': good } });
    }
    // Loopback stays fine while nothing scrapes through a Service.
    accepted({ config: { 'metrics-bind-address': '[::1]:10249' } });
    // The chart's default address serves every monitor.
    accepted({ metrics: { podMonitor: { enabled: true } } });
  });

  test('a PodMonitor and a ServiceMonitor at once are refused (every series twice)', () => {
    refused({ metrics: { podMonitor: { enabled: true }, serviceMonitor: { enabled: true } } }, /serviceMonitor/);
    accepted({ metrics: { podMonitor: { enabled: true }, serviceMonitor: { enabled: false }, service: { enabled: true } } });
    refused({ metrics: { podMonitor: { enabled: true, bogus: 1 } } }, /bogus/);
    refused({ metrics: { podMonitor: { enabled: true, interval: '30' } } }, /interval/);
  });

  test('serviceMonitor.interval and the alert durations are Prometheus durations', () => {
    const sm = (interval: unknown) => ({ config: { 'metrics-bind-address': '0.0.0.0:10249' }, metrics: { serviceMonitor: { enabled: true, interval } } });
    for (const bad of ['bogus', '', '30', '1.5s', '-30s', '30 s', '1m30', 'PT30S', 30]) refused(sm(bad), /interval/);
    for (const good of ['30s', '1m30s', '15s', '1h', '500ms', '1d']) assert.match(accepted(sm(good)), new RegExp(`interval: ${good}\\b`));
    refused({ prometheusRule: { agentDownFor: 'soon' } }, /agentDownFor/);
    accepted({ prometheusRule: { enabled: true, agentDownFor: '1h30m' } });
  });

  test('probes: only the probe timing fields, each a positive integer; unknown keys anywhere are refused', () => {
    refused({ probes: { liveness: { foo: 1 } } }, /liveness.*foo|foo.*liveness/s);
    refused({ probes: { readiness: { httpGet: { path: '/x' } } } }, /httpGet/);
    refused({ probes: { startup: { exec: { command: ['true'] } } } }, /exec/);
    refused({ probes: { bogus: {} } }, /bogus/);
    refused({ probes: { liveness: { periodSeconds: 0 } } }, /periodSeconds/);
    refused({ probes: { startup: { failureThreshold: 'many' } } }, /failureThreshold/);
    const out = accepted({
      probes: {
        startup: { periodSeconds: 3, failureThreshold: 100, timeoutSeconds: 2 },
        liveness: { initialDelaySeconds: 5, terminationGracePeriodSeconds: 10 },
      },
    });
    assert.match(out, /startupProbe:[\s\S]*failureThreshold: 100/);
  });

  test('the other objects are closed too: updateStrategy, tolerations, affinity, extraEnv, extraVolumeMounts, appArmor, migration, clean-up', () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ updateStrategy: { type: 'Recreate' } }, /updateStrategy/],
      [{ updateStrategy: { rollingUpdate: { maxUnavailable: 1, maxSurge: 1 } } }, /maxUnavailable|maxSurge/],
      [{ updateStrategy: { rollingUpdate: { maxUnavailable: 0, maxSurge: 0 } } }, /maxUnavailable/],
      [{ updateStrategy: { rollingUpdate: { maxUnavailable: '150%' } } }, /maxUnavailable/],
      [{ updateStrategy: { rollingUpdate: { maxUnavailable: -1 } } }, /maxUnavailable/],
      [{ updateStrategy: { rollingUpdate: { partition: 1 } } }, /partition/],
      [{ updateStrategy: { maxUnavailable: 1 } }, /maxUnavailable/],
      [{ tolerations: [{ operator: 'Exists', effekt: 'NoSchedule' }] }, /effekt/],
      [{ affinity: { nodeAfinity: {} } }, /nodeAfinity/],
      [
        {
          affinity: {
            nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'a', operator: 'in' }] }] } },
          },
        },
        /operator/,
      ],
      [{ extraEnv: [{ name: 'A', valu: 'x' }] }, /valu/],
      [{ extraVolumes: [{ emptyDir: {} }] }, /name/],
      [{ extraVolumeMounts: [{ name: 'x' }] }, /mountPath/],
      [{ extraVolumeMounts: [{ name: 'x', mountPath: '/x', readonly: true }] }, /readonly/],
      [{ securityContext: { seLinuxOptions: { typ: 'spc_t' } } }, /typ/],
      [{ imagePullSecrets: [{ nam: 'x' }] }, /nam/],
      [{ dnsPolicy: 'None' }, /dnsPolicy/],
      [{ dnsPolicy: 'clusterfirst' }, /dnsPolicy/],
      [{ appArmor: { mode: 'always' } }, /mode/],
      [{ appArmor: { unconfined: 'maybe' } }, /unconfined/],
      [{ migration: { label: 'kpr io/proxy' } }, /label/],
      [{ migration: { value: 'not a value' } }, /value/],
      [{ cleanupOnUninstall: { enabled: true, nodes: ['node-a'] } }, /nodes/],
      [{ cleanupOnUninstall: { timeoutSeconds: 5 } }, /timeoutSeconds/],
      [{ kubeconfigFromConfigMap: { enabled: true }, k8sServiceHost: '198.18.0.2' }, /k8sServiceHost/],
      [{ kubeconfigFromConfigMap: { enabled: true }, config: { kubeconfig: '/etc/kubeconfig' } }, /kubeconfig/],
      [{ kubeconfigFromConfigMap: { name: 'Kube_Proxy' } }, /name/],
      [{ kubeconfigFromConfigMap: { path: '/x' } }, /path/],
      [{ kubeProxyConfigMap: { enabled: true }, kubeconfigFromConfigMap: { enabled: true } }, /kubeconfigFromConfigMap/],
      [{ kubeProxyConfigMap: { name: 'Kube_Proxy' } }, /name/],
      [{ kubeProxyConfigMap: { args: '--config=/var/lib/kube-proxy/config.conf' } }, /args/],
      [{ kubeProxyConfigMap: { args: [''] } }, /args/],
      [{ kubeProxyConfigMap: { key: 'config.conf' } }, /key/],
      [{ conntrackSysctls: { enabled: 'auto' } }, /enabled/],
      [{ conntrackSysctls: { maxPerCore: 1 } }, /maxPerCore/],
    ];
    for (const [values, names] of cases) refused(values, names);
  });

  test('good values of every new setting are accepted', () => {
    accepted({
      kubeconfigFromConfigMap: { enabled: true, name: 'kpr-kubeconfig', key: 'kubeconfig.conf' },
      conntrackSysctls: { enabled: true },
      dnsPolicy: 'ClusterFirstWithHostNet',
      appArmor: { unconfined: true, mode: 'annotation' },
      updateStrategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: '10%' } },
      probes: { host: '::1', startup: { periodSeconds: 1, failureThreshold: 300 } },
      extraVolumes: [{ name: 'extra', hostPath: { path: '/etc/extra', type: 'Directory' } }],
      extraVolumeMounts: [{ name: 'extra', mountPath: '/etc/extra', readOnly: true, mountPropagation: 'HostToContainer' }],
      extraEnv: [
        { name: 'A', value: 'b' },
        { name: 'C', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
      ],
      tolerations: [{ key: 'k', operator: 'Equal', value: 'v', effect: 'NoExecute', tolerationSeconds: 30 }],
      affinity: {
        nodeAffinity: {
          preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 1, preference: { matchExpressions: [{ key: 'a', operator: 'Exists' }] } }],
        },
      },
      migration: { enabled: true, label: 'example.com/service-proxy', value: 'kpr-v1' },
      cleanupOnUninstall: { enabled: true, timeoutSeconds: 600 },
      config: { 'healthz-bind-address': '[::]:10256', 'metrics-bind-address': '0.0.0.0:10249' },
      metrics: { service: { enabled: true }, serviceMonitor: { enabled: true, interval: '1m' } },
    });
    accepted({
      kubeProxyConfigMap: { enabled: true, name: 'kpr-kube-proxy', args: ['--config=/var/lib/kube-proxy/config.conf', '--v=2'] },
      k8sServiceHost: '198.18.0.2',
      conntrackSysctls: { enabled: null },
    });
    accepted({ updateStrategy: { type: 'OnDelete' } });
    accepted({ updateStrategy: { type: 'OnDelete', rollingUpdate: null } });
  });
});
