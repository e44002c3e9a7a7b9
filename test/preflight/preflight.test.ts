/**
 * `kpr preflight` reports this machine's facts (compared with uname, /proc,
 * /sys) and passes here; a failing check exits non-zero and names what is
 * missing.
 */
import { expectedAutoUdpTermination } from '../support/kernel.js';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs, { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { effectiveCapabilities, kernelVersion, mountTypeOf } from '../../agent/preflight/checks.js';
import { KERNEL_FEATURE_NAMES, formatFeature } from '../../agent/datapath/kernel-features.js';
import { currentNetnsCookie, tcxSupported } from '../../native/index.js';
import { findCgroup2Mount } from '../../agent/runtime/cgroup.js';
import { bpfObjectPath, cliBin } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';
import { BpfObject, ensureBpffs } from '../../native/index.js';
import { mapPinDir, mapPinPath, objectPins } from '../../agent/datapath/pins.js';
import { MAPS } from '../../agent/maps/registry.js';
import { bpffsTempDir, rmrf, svcKey, svcVal } from '../support/bpf-fixtures.js';

function preflight(...args: string[]) {
  return preflightEnv({}, ...args);
}

function preflightEnv(env: NodeJS.ProcessEnv, ...args: string[]) {
  const r = spawnSync(cliBin, ['preflight', ...args], { encoding: 'utf8', env: { ...process.env, ...env } });
  return { out: r.stdout, err: r.stderr, status: r.status };
}

test('pure helpers: kernel version, capabilities, mount lookup', () => {
  assert.deepEqual(kernelVersion('6.1.0-18-amd64'), [6, 1]);
  assert.deepEqual(kernelVersion('5.10.209'), [5, 10]);
  assert.equal(kernelVersion('garbage'), undefined);
  assert.deepEqual(effectiveCapabilities('CapEff:\t000001ffffffffff\n'), ['CAP_NET_ADMIN', 'CAP_SYS_ADMIN', 'CAP_SYS_RESOURCE', 'CAP_PERFMON', 'CAP_BPF']);
  assert.deepEqual(effectiveCapabilities('CapEff:\t0000000000001000\n'), ['CAP_NET_ADMIN']);
  const mounts = 'sysfs /sys sysfs rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw 0 0\nbpf /sys/fs/bpf bpf rw 0 0\n/dev/sda1 / ext4 rw 0 0\n';
  assert.deepEqual(mountTypeOf('/sys/fs/cgroup/kubepods', mounts), { mountPoint: '/sys/fs/cgroup', fsType: 'cgroup2' });
  assert.deepEqual(mountTypeOf('/sys/fs/cgroupx', mounts), { mountPoint: '/sys', fsType: 'sysfs' });
  assert.deepEqual(mountTypeOf('/tmp', mounts), { mountPoint: '/', fsType: 'ext4' });
});

test("reports this machine's facts and passes (-o json)", () => {
  requireRoot();
  const r = preflight('-o', 'json', '--bpf-object', bpfObjectPath);
  const report = JSON.parse(r.out);
  assert.equal(r.status, 0, r.out + r.err);
  assert.equal(report.ok, true);
  assert.equal(report.facts.kernelRelease, execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim());
  assert.equal(report.facts.btf, existsSync('/sys/kernel/btf/vmlinux'));
  assert.equal(report.facts.cgroup2Mount, findCgroup2Mount(readFileSync('/proc/mounts', 'utf8')));
  assert.equal(report.facts.uid, 0);
  assert.ok(report.facts.capabilities.includes('CAP_BPF'));
  const bpffsMounted = readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[1] === '/sys/fs/bpf' && l.split(' ')[2] === 'bpf');
  assert.equal(report.facts.bpffsMounted, bpffsMounted);
  const names = report.checks.map((c: { name: string }) => c.name);
  assert.deepEqual(names, [
    'kernel',
    'btf',
    'cgroup2',
    'capabilities',
    'bpffs',
    'libbpf',
    'bpf-object',
    'map-sizes',
    'map-layouts',
    ...KERNEL_FEATURE_NAMES.map((f) => `feature:${f}`),
    'batch-writer',
    'snat-ports',
  ]);
  // Each feature row is the probe's answer, in the agent's words.
  for (const f of report.features) {
    const row = report.checks.find((c: { name: string }) => c.name === `feature:${f.feature}`);
    assert.equal(row.detail, formatFeature(f));
    assert.equal(row.ok, f.state === 'active');
  }
  const feature = (name: string) => report.features.find((f: { feature: string }) => f.feature === name);
  // Without tcx the tc programs attach as clsact filters; without bpf_sock_destroy (before 6.5)
  // connected UDP sockets are destroyed through netlink sock_diag (Debian's kernels have it).
  assert.deepEqual([feature('tcx').state, feature('tcx').fallback], tcxSupported() ? ['active', undefined] : ['fallback', 'clsact/cls_bpf']);
  assert.deepEqual(
    [feature('bpf-sock-destroy').state, feature('bpf-sock-destroy').fallback],
    expectedAutoUdpTermination() === 'bpf_sock_destroy' ? ['active', undefined] : ['fallback', 'netlink SOCK_DESTROY'],
  );
  let sockopt = true;
  try {
    currentNetnsCookie();
  } catch {
    sockopt = false;
  }
  // Without SO_NETNS_COOKIE the fallback is tried for real (and works as root with cgroup v2).
  assert.deepEqual(
    [feature('netns-cookie-sockopt').state, feature('netns-cookie-sockopt').fallback],
    sockopt ? ['active', undefined] : ['fallback', 'cgroup sock_create probe'],
  );
  const degraded = report.checks
    .filter((c: { ok: boolean; severity: string }) => !c.ok && c.severity === 'advisory')
    .map((c: { name: string }) => c.name.replace(/^feature:/, ''));
  const load = report.checks.find((c: { name: string }) => c.name === 'bpf-object');
  assert.match(load.detail, /programs and \d+ maps load/);
  const writer = report.checks.find((c: { name: string }) => c.name === 'batch-writer');
  assert.equal(writer.ok, true, writer.detail);
  assert.match(writer.detail, /libkpr_batch_writer\.so loads and starts its thread/);
  // The table form says the same.
  const table = preflight('--bpf-object', bpfObjectPath);
  assert.equal(table.status, 0);
  assert.match(table.out, /^ok\s+kernel\s/m);
  // The verdict never calls the node fine without naming what is off or falls back.
  if (degraded.length === 0) assert.match(table.out, /this node can run kpr; every kernel feature is active/);
  else assert.match(table.out, new RegExp(`this node can run kpr, degraded: ${degraded.join(', ')} `));
});

test('features the kernel lacks are named in the verdict: a fallback in use, or what is lost', () => {
  requireRoot();
  const env = { KPR_DISABLE_KERNEL_FEATURES: 'netns-cookie-sockopt,tcx,bpf-sock-destroy' };
  const r = preflightEnv(env, '--bpf-object', bpfObjectPath);
  assert.equal(r.status, 0, r.out + r.err);
  assert.match(
    r.out,
    /^warn\s+feature:netns-cookie-sockopt netns-cookie-sockopt: fallback \(cgroup sock_create probe\) \[disabled by KPR_DISABLE_KERNEL_FEATURES; kernel 5\.14\+\]/m,
  );
  // The agent's fallbacks for them: clsact filters for tcx, netlink SOCK_DESTROY for bpf_sock_destroy.
  assert.match(r.out, /^warn\s+feature:tcx\s+tcx: fallback \(clsact\/cls_bpf\) \[disabled by KPR_DISABLE_KERNEL_FEATURES; kernel 6\.6\+/m);
  assert.match(
    r.out,
    /^warn\s+feature:bpf-sock-destroy bpf-sock-destroy: fallback \(netlink SOCK_DESTROY\) \[disabled by KPR_DISABLE_KERNEL_FEATURES; kernel 6\.5\+; sock_diag SOCK_DESTROY works here/m,
  );
  assert.match(r.out, /^preflight: this node can run kpr, degraded: netns-cookie-sockopt, tcx, bpf-sock-destroy/m);
  const json = JSON.parse(preflightEnv(env, '-o', 'json', '--bpf-object', bpfObjectPath).out);
  assert.deepEqual(
    json.features.filter((f: { state: string }) => f.state !== 'active').map((f: { feature: string; state: string }) => `${f.feature}=${f.state}`),
    ['netns-cookie-sockopt=fallback', 'tcx=fallback', 'bpf-sock-destroy=fallback'],
  );
});

test('a failing check exits non-zero and names what is missing', () => {
  requireRoot();
  const r = preflight('--bpffs', '/nonexistent/kpr', '--cgroup-path', '/nonexistent/cgroup', '--bpf-object', '/nonexistent/kpr.bpf.o');
  assert.equal(r.status, 1, r.out + r.err);
  assert.match(r.out, /^FAIL\s+cgroup2\s+cgroup path \/nonexistent\/cgroup does not exist/m);
  assert.match(r.out, /^FAIL\s+bpffs\s+--bpffs \/nonexistent\/kpr is not inside the BPF filesystem \/sys\/fs\/bpf/m);
  assert.match(r.out, /^FAIL\s+bpf-object\s+\/nonexistent\/kpr\.bpf\.o not found/m);
  assert.match(r.out, /preflight: missing: cgroup2, bpffs, bpf-object/);
  // Advisory: no writer library beside the object is a warning, not a failure.
  assert.match(r.out, /^warn\s+batch-writer\s+\/nonexistent\/libkpr_batch_writer\.so not found .*written synchronously/m);
  const json = JSON.parse(preflight('-o', 'json', '--cgroup-path', '/tmp').out);
  assert.equal(json.ok, false);
  const cg = json.checks.find((c: { name: string }) => c.name === 'cgroup2');
  assert.equal(cg.ok, false);
  assert.match(cg.detail, /\/tmp is on /);
  assert.ok(cg.fix);
});

test('map sizes: the trial load uses the configured sizes; pins at another size are named with their fill (the agent migrates them); a pin of a newer layout fails map-layouts', () => {
  requireRoot();
  const dir = bpffsTempDir();
  try {
    // A previous agent's pins, kpr_svc at 40 entries, 10 of them used.
    ensureBpffs(mapPinDir(dir));
    const obj = BpfObject.open(bpfObjectPath, { ...objectPins(dir), maxEntries: { kpr_svc: 40 } });
    try {
      obj.load();
      for (let i = 0; i < 10; i++) obj.map('kpr_svc').update(svcKey(i), svcVal(i, 1));
    } finally {
      obj.close();
    }
    const r = preflight(
      '--bpffs',
      dir,
      '--bpf-object',
      bpfObjectPath,
      '--map-size-services',
      '80',
      '--map-size-backends',
      '1000',
      '--map-size-conntrack',
      '4096',
    );
    assert.equal(r.status, 0, r.out + r.err);
    assert.match(r.out, /^ok\s+bpf-object\s+.* maps load at the configured map sizes/m);
    assert.match(
      r.out,
      /^ok\s+map-sizes\s+configured: kpr_svc 80, .*kpr_backend 1000, kpr_aff_match 1000, .*kpr_ct 4\d{3}, .*; pinned: .*kpr_svc 10\/40 \(25\.0%\).*; pinned at another size: kpr_svc 40, not 80, .*: the agent migrates the maps to a new set of the configured sizes at start, live/m,
    );
    assert.match(r.out, /^ok\s+map-layouts\s+\d+ map pins under /m);
    const json = JSON.parse(
      preflight('-o', 'json', '--bpffs', dir, '--bpf-object', bpfObjectPath, '--map-size-services', '40', '--conntrack-max-per-core', '0').out,
    );
    // kpr_ct at the compiled size (--conntrack-max-per-core 0) as pinned: every size matches.
    assert.deepEqual(
      json.mapSizes.find((m: { map: string }) => m.map === 'kpr_svc'),
      { map: 'kpr_svc', configured: 40, pinned: 40, entries: 10 },
    );
    const row = json.checks.find((c: { name: string }) => c.name === 'map-sizes');
    assert.equal(row.ok, true, row.detail);
    // A pin of a layout this release does not know yet: the agent would refuse to start.
    fs.renameSync(mapPinPath(dir, 'kpr_ct'), path.join(mapPinDir(dir), `kpr_ct@v${MAPS.ct.version + 1}`));
    const newer = preflight('--bpffs', dir, '--bpf-object', bpfObjectPath);
    assert.equal(newer.status, 1, newer.out);
    assert.match(
      newer.out,
      new RegExp(
        `^FAIL\\s+map-layouts\\s+.*kpr_ct at layout v${MAPS.ct.version + 1} \\(maps/kpr_ct@v${MAPS.ct.version + 1}\\), newer than this release's v${MAPS.ct.version}: the agent refuses to start`,
        'm',
      ),
    );
    // A bad value is refused before anything runs.
    const bad = preflight('--map-size-conntrack', 'many');
    assert.equal(bad.status, 2, 'a usage error');
    assert.match(bad.err, /invalid --map-size-conntrack "many"/);
  } finally {
    rmrf(dir);
  }
});
