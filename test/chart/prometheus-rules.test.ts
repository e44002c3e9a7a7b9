/**
 * The chart's PrometheusRule through the real promtool: rendered by the real
 * helm, its groups are what `promtool check rules` accepts, and every alert
 * fires on the synthetic series of test/chart/kpr-alerts.promtest.yaml (and
 * stays quiet on the healthy ones) under `promtool test rules`.
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import YAML from 'yaml';
import { repoRoot } from '../../sandbox/repo.js';
import { promtool, renderedRuleGroups, ruleFile } from '../support/prometheus.js';

const UNIT_TESTS = path.join(repoRoot, 'test', 'chart', 'kpr-alerts.promtest.yaml');

function inTempDir<T>(fn: (dir: string) => T): T {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-promtool-'));
  try {
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("the chart's alerts with the real promtool", () => {
  test("promtool check rules accepts the rendered rules, with the default job (kube-proxy), prometheus-operator's and another", () => {
    for (const set of [[], ['metrics.serviceMonitor.job='], ['prometheusRule.job=node-proxies', 'prometheusRule.cacheAgeSeconds=900']]) {
      inTempDir((dir) => {
        const groups = renderedRuleGroups(set);
        writeFileSync(path.join(dir, 'rules.yaml'), ruleFile(groups));
        const r = promtool(['check', 'rules', 'rules.yaml'], dir);
        assert.equal(r.status, 0, `${set.join(',')}: ${r.stdout}${r.stderr}`);
        assert.match(r.stdout, /SUCCESS: 8 rules found/);
        const job = set.length === 0 ? 'kube-proxy' : set[0].split('=')[1] || 'kpr-metrics';
        for (const rule of groups.flatMap((g) => g.rules)) assert.match(rule.expr, new RegExp(`job="${job}"`), `${rule.alert} selects its job`);
      });
    }
  });

  test('a broken expression is caught by promtool (the check can fail)', () => {
    inTempDir((dir) => {
      const groups = renderedRuleGroups();
      groups[0].rules[0].expr = 'up{job="x" == 0';
      writeFileSync(path.join(dir, 'rules.yaml'), ruleFile(groups));
      const r = promtool(['check', 'rules', 'rules.yaml'], dir);
      assert.notEqual(r.status, 0);
      assert.match(r.stdout + r.stderr, /parse error|unexpected/);
    });
  });

  test('promtool test rules: every alert fires on its series, and only there', () => {
    inTempDir((dir) => {
      const groups = renderedRuleGroups(['metrics.serviceMonitor.job=kube-proxy']);
      // The descriptions are prose for people; the summaries (with $labels and $value) are checked.
      for (const rule of groups.flatMap((g) => g.rules)) delete rule.annotations?.description;
      writeFileSync(path.join(dir, 'kpr-rules.yaml'), ruleFile(groups));
      copyFileSync(UNIT_TESTS, path.join(dir, 'kpr-alerts.promtest.yaml'));
      const r = promtool(['test', 'rules', 'kpr-alerts.promtest.yaml'], dir);
      assert.equal(r.status, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /SUCCESS/);
      // Every alert of the chart has a unit test.
      const tested = new Set(
        (
          YAML.parse(readFileSync(UNIT_TESTS, 'utf8')) as { tests: Array<{ alert_rule_test: Array<{ alertname: string; exp_alerts: unknown[] }> }> }
        ).tests.flatMap((t) => t.alert_rule_test.filter((a) => a.exp_alerts.length > 0).map((a) => a.alertname)),
      );
      for (const rule of groups.flatMap((g) => g.rules)) assert.ok(tested.has(rule.alert!), `${rule.alert} has a firing unit test`);
    });
  });
});
