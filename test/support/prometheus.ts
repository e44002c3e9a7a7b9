/**
 * Debian's prometheus package (`make deps-system` installs it) for the
 * monitoring tests: promtool on the chart's rules, and a real Prometheus
 * server scraping the sandbox agent. The server listens on 127.0.0.1 on a
 * free port, keeps everything in a temporary directory, and stop() kills it
 * and removes the directory.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { helm } from '../chart/helm.js';
import { repoRoot } from '../../sandbox/repo.js';

/** A binary of the prometheus package, found on PATH; a clear error when it is missing. */
export function prometheusTool(name: 'prometheus' | 'promtool'): string {
  for (const dir of (process.env.PATH ?? '/usr/bin:/bin').split(':')) {
    const p = path.join(dir, name);
    if (dir && existsSync(p)) return p;
  }
  throw new Error(`${name} not found on PATH: install Debian's prometheus package (make deps-system)`);
}

export function promtool(args: string[], cwd: string): SpawnSyncReturns<string> {
  return spawnSync(prometheusTool('promtool'), args, { cwd, encoding: 'utf8', timeout: 60_000 });
}

export interface RuleGroup {
  name: string;
  rules: Array<{ alert?: string; record?: string; expr: string; for?: string; labels?: Record<string, string>; annotations?: Record<string, string> }>;
}

/** The chart's PrometheusRule, rendered by the real helm with `set` (e.g. metrics.serviceMonitor.job=kube-proxy): its groups. */
export function renderedRuleGroups(set: string[] = []): RuleGroup[] {
  const chart = path.join(repoRoot, 'charts', 'kpr');
  const r = helm(
    'template',
    'kpr',
    chart,
    '--namespace',
    'kube-system',
    '--set',
    'prometheusRule.enabled=true',
    ...set.flatMap((s) => ['--set', s]),
    '-s',
    'templates/prometheusrule.yaml',
  );
  if (r.status !== 0) throw new Error(`helm template failed: ${r.stderr}`);
  const rule = YAML.parse(r.stdout) as { kind: string; spec: { groups: RuleGroup[] } };
  if (rule.kind !== 'PrometheusRule') throw new Error(`rendered ${rule.kind}, not a PrometheusRule`);
  return rule.spec.groups;
}

/** A Prometheus rule file (what prometheus and promtool read) of these groups. */
export function ruleFile(groups: RuleGroup[]): string {
  return YAML.stringify({ groups });
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

export interface PromResult {
  metric: Record<string, string>;
  value: [number, string];
}

export interface PrometheusServer {
  readonly url: string;
  readonly dir: string;
  /** An instant query; status "success" with the vector, or "error" with Prometheus' message. */
  query(expr: string): Promise<{ status: 'success'; result: PromResult[] } | { status: 'error'; error: string }>;
  /** GET of an API path (e.g. /api/v1/rules), parsed. */
  get(apiPath: string): Promise<any>;
  /** What the server logged (stderr). */
  log(): string;
  stop(): Promise<void>;
}

export interface PrometheusOptions {
  job: string;
  /** host:port targets scraped at /metrics. */
  targets: string[];
  /** More scrape configs, as prometheus.yml takes them (e.g. prometheus-operator.ts's), after the job's. */
  scrapeConfigs?: unknown[];
  scrapeIntervalSeconds?: number;
  /** Rule file contents (ruleFile()); evaluated at the scrape interval. */
  rules?: string;
}

/** Starts prometheus (127.0.0.1, free port, temp dir) and waits until it is ready; stop() in a finally. */
export async function startPrometheus(o: PrometheusOptions): Promise<PrometheusServer> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kpr-prometheus-'));
  const interval = `${o.scrapeIntervalSeconds ?? 1}s`;
  const config: Record<string, unknown> = {
    global: { scrape_interval: interval, evaluation_interval: interval, scrape_timeout: interval },
    scrape_configs: [...(o.targets.length ? [{ job_name: o.job, static_configs: [{ targets: o.targets }] }] : []), ...(o.scrapeConfigs ?? [])],
  };
  if (o.rules !== undefined) {
    writeFileSync(path.join(dir, 'rules.yaml'), o.rules);
    config.rule_files = ['rules.yaml'];
  }
  writeFileSync(path.join(dir, 'prometheus.yml'), YAML.stringify(config));
  let child: ChildProcess | undefined;
  let stderr = '';
  const stop = async (): Promise<void> => {
    const c = child;
    child = undefined;
    if (c && c.exitCode === null && c.signalCode === null) {
      const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
      c.kill('SIGTERM');
      const t = setTimeout(() => c.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(t);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    // A free port can be taken between the probe and the bind: a few attempts.
    for (let attempt = 0; ; attempt++) {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      stderr = '';
      child = spawn(
        prometheusTool('prometheus'),
        [
          `--config.file=${path.join(dir, 'prometheus.yml')}`,
          `--storage.tsdb.path=${path.join(dir, 'data')}`,
          `--web.listen-address=127.0.0.1:${port}`,
          '--storage.tsdb.retention.time=1h',
          '--log.level=info',
        ],
        { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] },
      );
      child.stderr!.on('data', (b: Buffer) => void (stderr = (stderr + b.toString()).slice(-200_000)));
      const ready = await waitReady(url, child, 30_000);
      if (ready) {
        const get = async (apiPath: string): Promise<any> => (await fetch(url + apiPath)).json();
        return {
          url,
          dir,
          get,
          async query(expr) {
            const body = (await get(`/api/v1/query?query=${encodeURIComponent(expr)}`)) as { status: string; data?: { result: PromResult[] }; error?: string };
            return body.status === 'success' ? { status: 'success', result: body.data!.result } : { status: 'error', error: String(body.error) };
          },
          log: () => stderr,
          stop,
        };
      }
      const c = child;
      child = undefined;
      if (c.exitCode === null) {
        c.kill('SIGKILL');
        await new Promise((r) => c.once('exit', r));
      }
      if (attempt >= 2 || !/address already in use/.test(stderr)) throw new Error(`prometheus did not become ready:\n${stderr.slice(-4000)}`);
    }
  } catch (err) {
    await stop();
    throw err;
  }
}

async function waitReady(url: string, child: ChildProcess, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (child.exitCode !== null || child.signalCode !== null) return false;
    try {
      const r = await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(1000) });
      if (r.status === 200) return true;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}
