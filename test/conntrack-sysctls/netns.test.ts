/**
 * `kpr conntrack-sysctls` for real, in a network namespace the test creates
 * (nsenter --net): kubeadm's config.conf with conntrack values and kube-proxy's
 * command line. The per-namespace timeouts and be_liberal are written and
 * read back inside that namespace; the host's (root namespace's) values are
 * the same before and after; nf_conntrack_max, which the kernel lets only the
 * initial namespace change, is reported as not applied (exit 0, a warning
 * on stderr) instead of crashing; --dry-run writes nothing; a second run
 * finds everything in place.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { Sandbox, nsPath } from '../../sandbox/netns.js';
import { CONNTRACK_SYSCTLS, HASHSIZE, type SysctlName } from '../../agent/conntrack-sysctls/plan.js';
import { sysctlFile } from '../../agent/conntrack-sysctls/proc-sys.js';
import { cliBin, repoRoot } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';

const NAMES = [...Object.values(CONNTRACK_SYSCTLS), HASHSIZE] as SysctlName[];
const configMap = YAML.parse(readFileSync(path.join(repoRoot, 'test', 'fixtures', 'kube-proxy', 'kubeadm-configmap.yaml'), 'utf8'));
/** kubeadm's config.conf with conntrack values other than a new namespace's (kernel) defaults. */
const CONFIG_CONF = (configMap.data['config.conf'] as string)
  .replace('tcpBeLiberal: false', 'tcpBeLiberal: true')
  .replace('tcpCloseWaitTimeout: null', 'tcpCloseWaitTimeout: 30m0s')
  .replace('udpStreamTimeout: 0s', 'udpStreamTimeout: 2m30s')
  .replace('udpTimeout: 0s', 'udpTimeout: 45s');

/** The host's values, read by this process (the root network namespace). */
function hostValues(): Record<string, string> {
  return Object.fromEntries(NAMES.map((n) => [n, readFileSync(sysctlFile(n), 'utf8').trim()]));
}

describe('kpr conntrack-sysctls in a network namespace of its own', () => {
  let sandbox: Sandbox;
  let ns: string;
  let config: string;
  const inNs = (...args: string[]) => spawnSync('nsenter', [`--net=${nsPath(ns)}`, ...args], { encoding: 'utf8', timeout: 60_000 });
  /** The namespace's value of a per-namespace sysctl (/proc/sys/net is the opener's namespace's). */
  const nsValue = (name: SysctlName) => {
    const r = inNs('cat', sysctlFile(name));
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trim();
  };
  const run = (...extra: string[]) => inNs(cliBin, 'conntrack-sysctls', `--config=${config}`, '--hostname-override=node-1', ...extra);

  before(() => {
    requireRoot();
    sandbox = new Sandbox();
    ns = sandbox.addNamespace('ct');
    const dir = sandbox.own(mkdtempSync(path.join(os.tmpdir(), `${sandbox.runId}-ct-`)));
    config = path.join(dir, 'config.conf');
    writeFileSync(config, CONFIG_CONF);
    assert.match(CONFIG_CONF, /tcpCloseWaitTimeout: 30m0s[\s\S]*udpStreamTimeout: 2m30s\n\s+udpTimeout: 45s/);
  });

  after(async () => {
    await sandbox?.teardown();
  });

  test("the namespace's timeouts are written and read back there; the host's values stay; nf_conntrack_max is reported, not written", () => {
    // The kernel shows nf_conntrack_max read-only outside the initial namespace: what keeps the host's global value safe here.
    const mode = inNs('stat', '-c', '%a', sysctlFile(CONNTRACK_SYSCTLS.max));
    assert.equal(mode.stdout.trim(), '444', `nf_conntrack_max must be read-only in a child namespace on this kernel: ${mode.stdout}${mode.stderr}`);
    const host = hostValues();
    const fresh = Object.fromEntries(NAMES.map((n) => [n, nsValue(n)]));
    // Ask for an nf_conntrack_max above the host's, so the raise is wanted and refused.
    const raise = `--conntrack-min=${Number(host[CONNTRACK_SYSCTLS.max]) * 2}`;

    const dry = run('--dry-run', raise);
    assert.equal(dry.status, 0, dry.stderr);
    assert.match(
      dry.stdout,
      /net\.netfilter\.nf_conntrack_tcp_timeout_close_wait\s+\d+\s+1800\s+would write\s+tcpCloseWaitTimeout 1800s \(.*config\.conf: conntrack\.tcpCloseWaitTimeout\)/,
    );
    assert.deepEqual(Object.fromEntries(NAMES.map((n) => [n, nsValue(n)])), fresh, '--dry-run wrote nothing');

    const r = run(raise);
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    assert.equal(nsValue(CONNTRACK_SYSCTLS.tcpEstablished), '86400', "kube-proxy's default (tcpEstablishedTimeout: null)");
    assert.equal(nsValue(CONNTRACK_SYSCTLS.tcpCloseWait), '1800');
    assert.equal(nsValue(CONNTRACK_SYSCTLS.tcpBeLiberal), '1');
    assert.equal(nsValue(CONNTRACK_SYSCTLS.udp), '45');
    assert.equal(nsValue(CONNTRACK_SYSCTLS.udpStream), '150');
    for (const n of [
      CONNTRACK_SYSCTLS.tcpEstablished,
      CONNTRACK_SYSCTLS.tcpCloseWait,
      CONNTRACK_SYSCTLS.tcpBeLiberal,
      CONNTRACK_SYSCTLS.udp,
      CONNTRACK_SYSCTLS.udpStream,
    ]) {
      assert.match(r.stdout, new RegExp(`${n.replaceAll('.', '\\.')}\\s+\\d+\\s+\\d+\\s+written\\s`), n);
    }
    assert.match(
      r.stdout,
      /net\.netfilter\.nf_conntrack_max\s+\d+\s+\d+\s+skip\s+.*read-only here: only the host's \(initial\) network namespace may change it/,
    );
    assert.match(r.stderr, /kpr: warning: net\.netfilter\.nf_conntrack_max: .*read-only here/);
    assert.equal(nsValue(CONNTRACK_SYSCTLS.max), host[CONNTRACK_SYSCTLS.max]);
    assert.deepEqual(hostValues(), host, "the host's conntrack sysctls are unchanged");

    const again = run();
    assert.equal(again.status, 0, again.stderr);
    assert.doesNotMatch(again.stdout, /written|would write/);
    assert.match(again.stdout, /net\.netfilter\.nf_conntrack_tcp_timeout_close_wait\s+1800\s+1800\s+keep/);
    assert.deepEqual(hostValues(), host);
  });
});
