/**
 * agent/config/duration.ts against Go's time.ParseDuration: the accept and reject
 * tables of Go's own tests (src/time/time_test.go, parseDurationTests and
 * parseDurationErrorTests, the inputs a JavaScript string can hold), in
 * nanoseconds; then kpr's parseDuration (bare seconds, no negatives, the
 * flag named) and Go durations reaching the agent's settings.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseDuration, parseGoDuration } from '../../agent/config/duration.js';
import { parseAgentArgs, type AgentConfig } from '../../agent/config/agent-config.js';

const ns = 1n;
const us = 1000n * ns;
const ms = 1000n * us;
const s = 1000n * ms;
const m = 60n * s;
const h = 60n * m;
const MAX = (1n << 63n) - 1n;
const MIN = -(1n << 63n);

const GO_OK: Array<[string, bigint]> = [
  // simple
  ['0', 0n],
  ['5s', 5n * s],
  ['30s', 30n * s],
  ['1478s', 1478n * s],
  // sign
  ['-5s', -5n * s],
  ['+5s', 5n * s],
  ['-0', 0n],
  ['+0', 0n],
  // decimal
  ['5.0s', 5n * s],
  ['5.6s', 5n * s + 600n * ms],
  ['5.s', 5n * s],
  ['.5s', 500n * ms],
  ['1.0s', 1n * s],
  ['1.00s', 1n * s],
  ['1.004s', 1n * s + 4n * ms],
  ['1.0040s', 1n * s + 4n * ms],
  ['100.00100s', 100n * s + 1n * ms],
  // different units
  ['10ns', 10n * ns],
  ['11us', 11n * us],
  ['12\u00b5s', 12n * us], // U+00B5
  ['12\u03bcs', 12n * us], // U+03BC
  ['13ms', 13n * ms],
  ['14s', 14n * s],
  ['15m', 15n * m],
  ['16h', 16n * h],
  // composite durations
  ['3h30m', 3n * h + 30n * m],
  ['10.5s4m', 4n * m + 10n * s + 500n * ms],
  ['-2m3.4s', -(2n * m + 3n * s + 400n * ms)],
  ['1h2m3s4ms5us6ns', 1n * h + 2n * m + 3n * s + 4n * ms + 5n * us + 6n * ns],
  ['39h9m14.425s', 39n * h + 9n * m + 14n * s + 425n * ms],
  // large value
  ['52763797000ns', 52763797000n * ns],
  // more than 9 digits after decimal point, see https://golang.org/issue/6617
  ['0.3333333333333333333h', 20n * m],
  // 9007199254740993 = 1<<53+1 cannot be stored precisely in a float64
  ['9007199254740993ns', (1n << 53n) + 1n],
  // largest duration that can be represented by int64 in nanoseconds
  ['9223372036854775807ns', MAX],
  ['9223372036854775.807us', MAX],
  ['9223372036s854ms775us807ns', MAX],
  ['-9223372036854775808ns', MIN],
  ['-9223372036854775.808us', MIN],
  ['-9223372036s854ms775us808ns', MIN],
  // largest negative round trip value, see https://golang.org/issue/48629
  ['-2562047h47m16.854775808s', MIN],
  // huge string; issue 15011.
  ['0.100000000000000000000h', 6n * m],
  // the first overflow check in leadingFraction (float64 rounding, as Go)
  ['0.830103483285477580700h', 49n * m + 48n * s + 372539827n * ns],
  // what metav1.Duration prints (kubeadm's and kube-proxy's configs)
  ['24h0m0s', 24n * h],
  ['1m30s', 90n * s],
  ['300ms', 300n * ms],
  ['1h', h],
];

const GO_ERRORS: Array<[string, RegExp]> = [
  ['', /^Error: time: invalid duration ""$/],
  ['3', /^Error: time: missing unit in duration "3"$/],
  ['-', /^Error: time: invalid duration "-"$/],
  ['s', /^Error: time: invalid duration "s"$/],
  ['.', /^Error: time: invalid duration "."$/],
  ['-.', /^Error: time: invalid duration "-."$/],
  ['.s', /^Error: time: invalid duration ".s"$/],
  ['+.s', /^Error: time: invalid duration "\+.s"$/],
  ['1d', /^Error: time: unknown unit "d" in duration "1d"$/],
  ['\uFFFD', /^Error: time: invalid duration/],
  ['\uFFFD hello \uFFFD world', /^Error: time: invalid duration/],
  ['1s ', /^Error: time: unknown unit "s " in duration/],
  // overflow
  ['9223372036854775810ns', /^Error: time: invalid duration/],
  ['9223372036854775808ns', /^Error: time: invalid duration/],
  ['-9223372036854775809ns', /^Error: time: invalid duration/],
  ['9223372036854776us', /^Error: time: invalid duration/],
  ['3000000h', /^Error: time: invalid duration/],
  ['9223372036854775.808us', /^Error: time: invalid duration/],
  ['9223372036854ms775us808ns', /^Error: time: invalid duration/],
];

test("parseGoDuration accepts what Go's time.ParseDuration accepts, to the nanosecond", () => {
  for (const [text, want] of GO_OK) assert.equal(parseGoDuration(text), want, JSON.stringify(text));
});

test("parseGoDuration refuses what Go refuses, with Go's message", () => {
  for (const [text, want] of GO_ERRORS) assert.throws(() => parseGoDuration(text), want, JSON.stringify(text));
});

test('parseDuration: milliseconds; a bare number is seconds; negatives and Go errors name the setting', () => {
  assert.equal(parseDuration('1m30s'), 90_000);
  assert.equal(parseDuration('24h0m0s'), 86_400_000);
  assert.equal(parseDuration('300ms'), 300);
  assert.equal(parseDuration('1.5us'), 0.0015);
  assert.equal(parseDuration('0'), 0);
  assert.equal(parseDuration('30'), 30_000, 'kpr: bare seconds');
  assert.equal(parseDuration(' 2.5 '), 2500);
  assert.throws(() => parseDuration('-1s', '--sync-period'), /^Error: invalid --sync-period "-1s" \(must not be negative\)$/);
  assert.throws(
    () => parseDuration('1d', '--sync-period'),
    /^Error: invalid --sync-period "1d" \(a Go duration such as 300ms, 30s, 1m30s or 24h0m0s: time: unknown unit "d" in duration "1d"\)$/,
  );
  assert.throws(() => parseDuration('ten'), /^Error: invalid duration "ten"/);
});

test("Go durations reach the agent's settings, from flags and from a --config file", () => {
  const base = ['--cgroup-path', '/sys/fs/cgroup'];
  const cfg = parseAgentArgs(
    [...base, '--sync-period', '1m30s', '--min-sync-period=300ms', '--ct-tcp-timeout', '24h0m0s', '--ct-udp-timeout', '1m', '--ct-sweep-interval', '1h'],
    {},
  ) as AgentConfig;
  assert.deepEqual([cfg.syncPeriodMs, cfg.minSyncPeriodMs, cfg.ctTcpTimeoutS, cfg.ctUdpTimeoutS, cfg.ctSweepIntervalMs], [90_000, 300, 86_400, 60, 3_600_000]);
  assert.throws(() => parseAgentArgs([...base, '--ct-tcp-closing-timeout', '10x'], {}), /invalid --ct-tcp-closing-timeout "10x"/);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-duration-'));
  try {
    const file = path.join(dir, 'config.yaml');
    writeFileSync(file, 'sync-period: 2m30s\nct-tcp-closing-timeout: 1m0s\n');
    const fromFile = parseAgentArgs(['--config', file, ...base], {}) as AgentConfig;
    assert.deepEqual([fromFile.syncPeriodMs, fromFile.ctTcpClosingTimeoutS], [150_000, 60]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
