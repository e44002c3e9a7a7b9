/**
 * `kpr preflight` reports this machine's facts (compared with uname, /proc,
 * /sys) and passes here; a failing check exits non-zero and names what is
 * missing.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { effectiveCapabilities, kernelVersion, mountTypeOf } from '../../agent/preflight/checks.js';
import { findCgroup2Mount } from '../../agent/cgroup.js';
import { bpfObjectPath, cliBin } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';

function preflight(...args: string[]) {
  const r = spawnSync(cliBin, ['preflight', ...args], { encoding: 'utf8' });
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

test('reports this machine\'s facts and passes (-o json)', () => {
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
  const bpffsMounted = readFileSync('/proc/mounts', 'utf8').split('\n').some((l) => l.split(' ')[1] === '/sys/fs/bpf' && l.split(' ')[2] === 'bpf');
  assert.equal(report.facts.bpffsMounted, bpffsMounted);
  const names = report.checks.map((c: { name: string }) => c.name);
  assert.deepEqual(names, ['kernel', 'kernel-udp-termination', 'kernel-tc-path', 'btf', 'cgroup2', 'capabilities', 'bpffs', 'libbpf', 'bpf-object', 'batch-writer']);
  const load = report.checks.find((c: { name: string }) => c.name === 'bpf-object');
  assert.match(load.detail, /programs and \d+ maps load/);
  const writer = report.checks.find((c: { name: string }) => c.name === 'batch-writer');
  assert.equal(writer.ok, true, writer.detail);
  assert.match(writer.detail, /libkpr_batch_writer\.so loads and starts its thread/);
  // The table form says the same.
  const table = preflight('--bpf-object', bpfObjectPath);
  assert.equal(table.status, 0);
  assert.match(table.out, /^ok\s+kernel\s/m);
  assert.match(table.out, /this node can run kpr/);
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
