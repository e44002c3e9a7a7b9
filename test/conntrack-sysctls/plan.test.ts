/**
 * kube-proxy's conntrack sysctl rules as planned steps (pure): nf_conntrack_max
 * = max(maxPerCore × CPUs, min), only raised and only where writable, the
 * hashsize raised with it to a quarter; timeouts written when not 0 and
 * different; be_liberal only turned on; a missing sysctl (nf_conntrack not
 * loaded) skipped with the reason.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ConntrackSysctlSettings } from '../../agent/config/conntrack-sysctl-settings.js';
import { CONNTRACK_SYSCTLS as S, HASHSIZE, planConntrackSysctls, type ConntrackFacts } from '../../agent/conntrack-sysctls/plan.js';

const dflt = "kube-proxy's default";
function settings(v: Partial<Record<keyof ConntrackSysctlSettings, number | boolean>> = {}): ConntrackSysctlSettings {
  const all = {
    maxPerCore: 32768,
    min: 131072,
    tcpEstablishedTimeoutS: 86400,
    tcpCloseWaitTimeoutS: 3600,
    tcpBeLiberal: false,
    udpTimeoutS: 0,
    udpStreamTimeoutS: 0,
    ...v,
  };
  return Object.fromEntries(Object.entries(all).map(([k, value]) => [k, { value, from: k in v ? 'test' : dflt }])) as unknown as ConntrackSysctlSettings;
}
const kernelDefaults: ConntrackFacts['current'] = {
  [S.max]: 65536,
  [HASHSIZE]: 16384,
  [S.tcpEstablished]: 432000,
  [S.tcpCloseWait]: 60,
  [S.tcpBeLiberal]: 0,
  [S.udp]: 30,
  [S.udpStream]: 120,
};
const facts = (over: Partial<ConntrackFacts> = {}): ConntrackFacts => ({ cpus: 8, current: kernelDefaults, maxWritable: true, ...over });
const brief = (steps: ReturnType<typeof planConntrackSysctls>) => steps.map((s) => `${s.name} ${s.action}${s.want === undefined ? '' : ` ${s.want}`}`);

test("kube-proxy's defaults on a kernel's defaults: max raised to 32768 x 8, hashsize to a quarter, the TCP timeouts set, the rest left", () => {
  const steps = planConntrackSysctls(settings(), facts());
  assert.deepEqual(brief(steps), [
    `${S.max} write 262144`,
    `${HASHSIZE} write 65536`,
    `${S.tcpEstablished} write 86400`,
    `${S.tcpCloseWait} write 3600`,
    `${S.tcpBeLiberal} leave`,
    `${S.udp} leave`,
    `${S.udpStream} leave`,
  ]);
  assert.equal(steps[1].after, S.max, 'the hashsize only after nf_conntrack_max was written');
  assert.match(steps[0].why, /max\(maxPerCore 32768 \(kube-proxy's default\) x 8 CPUs, min 131072 \(kube-proxy's default\)\) = 262144/);
});

test('nf_conntrack_max: min wins on few CPUs; never lowered; maxPerCore 0 leaves it; read-only here is skipped, not written', () => {
  assert.deepEqual(brief(planConntrackSysctls(settings(), facts({ cpus: 2 }))).slice(0, 2), [`${S.max} write 131072`, `${HASHSIZE} write 32768`]);
  const higher = planConntrackSysctls(settings(), facts({ current: { ...kernelDefaults, [S.max]: 1_000_000 } }));
  assert.deepEqual(brief(higher)[0], `${S.max} keep 262144`);
  assert.match(higher[0].why, /only raised, never lowered/);
  assert.ok(!higher.some((s) => s.name === HASHSIZE), 'no hashsize when the max is not raised');
  assert.deepEqual(brief(planConntrackSysctls(settings({ maxPerCore: 0 }), facts()))[0], `${S.max} leave`);
  const ro = planConntrackSysctls(settings(), facts({ maxWritable: false }));
  assert.deepEqual(brief(ro).slice(0, 2), [`${S.max} skip 262144`, `${S.tcpEstablished} write 86400`]);
  assert.match(ro[0].why, /read-only here: only the host's \(initial\) network namespace may change it/);
  const bigTable = planConntrackSysctls(settings(), facts({ current: { ...kernelDefaults, [HASHSIZE]: 262144 } }));
  assert.deepEqual(brief(bigTable)[1], `${HASHSIZE} keep`);
});

test('timeouts: 0 leaves as is, equal is kept, different is written (lowered too); be_liberal only turned on', () => {
  const steps = planConntrackSysctls(
    settings({ tcpEstablishedTimeoutS: 0, tcpCloseWaitTimeoutS: 60, tcpBeLiberal: true, udpTimeoutS: 10, udpStreamTimeoutS: 60 }),
    facts(),
  );
  assert.deepEqual(brief(steps).slice(2), [
    `${S.tcpEstablished} leave`,
    `${S.tcpCloseWait} keep 60`,
    `${S.tcpBeLiberal} write 1`,
    `${S.udp} write 10`,
    `${S.udpStream} write 60`,
  ]);
  assert.match(steps.find((s) => s.name === S.udp)!.why, /udpTimeout 10s \(test\)/);
});

test('nf_conntrack not loaded: every wanted value is skipped with the reason', () => {
  const steps = planConntrackSysctls(settings({ tcpBeLiberal: true }), facts({ current: {}, maxWritable: false }));
  assert.deepEqual(
    steps.map((s) => s.action),
    ['skip', 'skip', 'skip', 'skip', 'leave', 'leave'],
  );
  for (const s of steps.filter((x) => x.action === 'skip')) assert.match(s.why, /nf_conntrack not loaded/);
});
