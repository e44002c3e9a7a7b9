/**
 * TcAttacher in both tc attach modes against the real kernel, inside a
 * namespace the test creates: attaches only to the configured interfaces,
 * replaces a previous agent's program in place, forgets a vanished
 * interface, removes kpr's program from one renamed out of the patterns,
 * takes over from an agent of the other mode without leaving its
 * attachments behind, and picks tc when tcx is not there.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { BpfObject, ensureBpffs, withNetns } from '../../native/index.js';
import { TcAttacher } from '../../agent/datapath/tc-attacher.js';
import type { Fields, Logger } from '../../agent/log/log.js';
import { Sandbox, inNs, nsPath } from '../../sandbox/netns.js';
import { repoRoot } from '../support/paths.js';
import { requireRoot } from '../support/preflight.js';
import { anyIngressPrograms, kprIngressPrograms, tcModeCases, type TcMode } from '../support/tc-modes.js';

function recordingLog(lines: Array<Fields & { level: string; msg: string }>): Logger {
  const at =
    (level: string) =>
    (msg: string, fields: Fields = {}) =>
      void lines.push({ level, msg, ...fields });
  const log: Logger = { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug'), child: () => log };
  return log;
}

const modes: TcMode[] = tcModeCases().length > 1 ? ['tcx', 'tc'] : ['tc'];

for (const mode of modes) {
  test(`TcAttacher [${mode}]: configured interfaces only, replaced in place on restart, vanished forgotten, renamed-away detached`, async () => {
    requireRoot();
    const sb = new Sandbox();
    const obj = BpfObject.open(path.join(repoRoot, 'build', 'kpr_tc.bpf.o'), { pinMapsDir: ensureBpffs(path.join(sb.bpffsDir, 'maps')) });
    try {
      obj.load();
      const ns = sb.addNamespace('tca');
      for (const [a, b] of [
        ['ext0', 'peer0'],
        ['vpod1', 'peer1'],
        ['vpod2', 'peer2'],
      ])
        inNs(ns, 'ip', 'link', 'add', a, 'type', 'veth', 'peer', 'name', b);
      const inside = <T>(fn: () => T): T => withNetns(nsPath(ns), fn);
      const progs = (ifname: string) => inside(() => kprIngressPrograms(mode, ifname));
      const lines: Array<Fields & { level: string; msg: string }> = [];
      const make = () =>
        new TcAttacher({
          tcObject: obj,
          pinDir: path.join(sb.bpffsDir, 'links', 'tc'),
          netns: nsPath(ns),
          externalInterfaces: ['ext*'],
          podInterfaces: ['vpod*'],
          attachMode: mode,
          log: recordingLog(lines),
        });

      const first = make();
      assert.equal(first.mode(), mode);
      assert.deepEqual(first.sync().sort(), ['ext0', 'vpod1', 'vpod2']);
      assert.deepEqual(progs('ext0'), [obj.program('kpr_tc_ext').id]);
      assert.deepEqual(progs('vpod1'), [obj.program('kpr_tc_pod').id]);
      for (const other of ['peer0', 'peer1', 'peer2', 'lo'])
        assert.deepEqual(
          inside(() => anyIngressPrograms(other)),
          { tcx: [], tc: [] },
          `${other} is not configured`,
        );
      assert.deepEqual(first.sync(), [], 'nothing new on a rescan');

      // A restarted agent: a fresh object (new program ids) replaces the programs in place.
      const obj2 = BpfObject.open(path.join(repoRoot, 'build', 'kpr_tc.bpf.o'), { pinMapsDir: path.join(sb.bpffsDir, 'maps') });
      try {
        obj2.load();
        const second = new TcAttacher({
          tcObject: obj2,
          pinDir: path.join(sb.bpffsDir, 'links', 'tc'),
          netns: nsPath(ns),
          externalInterfaces: ['ext*'],
          podInterfaces: ['vpod*'],
          attachMode: mode,
          log: recordingLog(lines),
        });
        lines.length = 0;
        second.sync();
        assert.deepEqual(progs('ext0'), [obj2.program('kpr_tc_ext').id], 'one program, the new one');
        assert.deepEqual(progs('vpod2'), [obj2.program('kpr_tc_pod').id]);
        assert.ok(
          lines.filter((l) => l.msg === 'tc program attached').every((l) => l.replaced === true),
          JSON.stringify(lines),
        );
        assert.deepEqual(
          lines.filter((l) => l.msg === 'tc program detached'),
          [],
          'nothing removed on a plain restart',
        );

        // Vanished: forgotten (no error, nothing to detach). Renamed out of the patterns: detached.
        inNs(ns, 'ip', 'link', 'del', 'vpod1');
        inNs(ns, 'ip', 'link', 'set', 'vpod2', 'name', 'other2');
        lines.length = 0;
        assert.deepEqual(second.sync(), []);
        assert.deepEqual(
          second
            .attachedInterfaces()
            .map((a) => a.ifname)
            .sort(),
          ['ext0'],
        );
        assert.deepEqual(progs('other2'), [], 'kpr left the interface that no longer matches');
        assert.deepEqual(
          lines.filter((l) => l.level === 'warn' || l.level === 'error'),
          [],
        );
        // Renamed to a name that still matches: kpr stays on it, once.
        inNs(ns, 'ip', 'link', 'set', 'ext0', 'name', 'ext9');
        lines.length = 0;
        assert.deepEqual(second.sync(), [], 'nothing re-attached: the attachment follows the interface');
        assert.ok(
          lines.some((l) => l.msg === 'tc interface renamed' && l.from === 'ext0' && l.interface === 'ext9'),
          JSON.stringify(lines),
        );
        assert.deepEqual(progs('ext9'), [obj2.program('kpr_tc_ext').id], 'one program on the renamed interface');
        assert.deepEqual(
          lines.filter((l) => l.level === 'warn'),
          [],
        );
        assert.deepEqual(
          second
            .attachedInterfaces()
            .map((a) => a.ifname)
            .sort(),
          ['ext9'],
        );
        // A new interface under a vanished one's name is attached again.
        inNs(ns, 'ip', 'link', 'add', 'vpod1', 'type', 'veth', 'peer', 'name', 'peer1b');
        assert.deepEqual(second.sync(), ['vpod1']);
        assert.deepEqual(progs('vpod1'), [obj2.program('kpr_tc_pod').id]);
      } finally {
        obj2.close();
      }
    } finally {
      obj.close();
      await sb.teardown();
    }
  });
}

test("TcAttacher: auto picks tcx only when the kernel has it; an agent of the other mode takes over without leaving the first one's attachments", async (t) => {
  requireRoot();
  const sb = new Sandbox();
  const obj = BpfObject.open(path.join(repoRoot, 'build', 'kpr_tc.bpf.o'), { pinMapsDir: ensureBpffs(path.join(sb.bpffsDir, 'maps')) });
  try {
    obj.load();
    const ns = sb.addNamespace('tcm');
    inNs(ns, 'ip', 'link', 'add', 'ext0', 'type', 'veth', 'peer', 'name', 'peer0');
    const lines: Array<Fields & { level: string; msg: string }> = [];
    const make = (attachMode: 'auto' | 'tcx' | 'tc', tcxAvailable?: () => boolean) =>
      new TcAttacher({
        tcObject: obj,
        pinDir: path.join(sb.bpffsDir, 'links', 'tc'),
        netns: nsPath(ns),
        externalInterfaces: ['ext*'],
        podInterfaces: [],
        attachMode,
        log: recordingLog(lines),
        ...(tcxAvailable ? { tcxAvailable } : {}),
      });
    assert.equal(make('auto', () => false).mode(), 'tc');
    assert.match(String(lines.at(-1)?.reason), /no tcx links \(before 6\.6\)/);
    assert.equal(make('auto', () => true).mode(), 'tcx');
    assert.equal(make('tc', () => true).mode(), 'tc');
    assert.equal(make('auto').mode(), modes.length > 1 ? 'tcx' : 'tc', 'auto on this kernel');
    if (modes.length < 2) {
      t.diagnostic('this kernel has no tcx: the mode switch needs both modes');
      return;
    }
    const progs = () => withNetns(nsPath(ns), () => anyIngressPrograms('ext0'));
    const ext = obj.program('kpr_tc_ext').id;
    make('tcx').sync();
    assert.deepEqual(progs(), { tcx: [ext], tc: [] });
    make('tc').sync();
    assert.deepEqual(progs(), { tcx: [], tc: [ext] }, 'tc took over; the tcx link is gone');
    make('tcx').sync();
    assert.deepEqual(progs(), { tcx: [ext], tc: [] }, 'and back');
  } finally {
    obj.close();
    await sb.teardown();
  }
});
