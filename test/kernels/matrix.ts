/**
 * `make test-kernels`: the kernel matrix. Runs the kernel-facing suites (BPF
 * programs, the libbpf binding, preflight, the CLI over pinned maps, the
 * end-to-end suites) on this machine's kernel and inside QEMU guests booting
 * Debian's own kernels (test/kernels/vm.sh), then prints feature × kernel:
 * pass, degraded (the fallback named, from the agent's own feature probes as
 * `kpr preflight -o json` reports them on that kernel), or FAIL.
 *
 *   node dist/test/kernels/matrix.js [--kernels host,5.10,6.1,6.12] [--files a.test.js,...] [--slim 6.1] [--out DIR] [--parallel]
 *
 * Writes DIR/<kernel>/{tests.txt,tests.jsonl,preflight.json,console.log} and
 * DIR/matrix.json; exits 1 when a test failed or a kernel did not finish.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { repoRoot } from '../../sandbox/repo.js';
import type { TestRecord } from './json-reporter.js';

export const ALL_KERNELS = ['host', '5.10', '6.1', '6.12'];

/** The suites that touch the kernel, as compiled files under dist/test. */
export const KERNEL_SUITES = [
  'bpf/layout.test.js',
  'bpf/tc-datapath.test.js',
  'bpf/maglev.test.js',
  'bpf/ct-half-flows.test.js',
  'bpf/monitor.test.js',
  'datapath/udp-terminator.test.js',
  'native/attach.test.js',
  'native/batch-writer.test.js',
  'native/bpf-map.test.js',
  'native/bpf-object.test.js',
  'datapath/map-sizes-loader.test.js',
  'native/bpffs-log.test.js',
  'maps/datapath-writer.test.js',
  'reconcile/read-back/drift-repair.test.js',
  'native/sock-diag.test.js',
  'datapath/tc-attacher.test.js',
  'native/tc-classic.test.js',
  'native/tcx.test.js',
  'bpf/tc-chain.test.js',
  'preflight/preflight.test.js',
  'cleanup/kpr-state.test.js',
  'e2e/clusterip.test.js',
  'e2e/semantics.test.js',
  'e2e/nodeport.test.js',
  'e2e/mesh.test.js',
  'e2e/snat-collision.test.js',

  'e2e/masquerade.test.js',
  'e2e/observability.test.js',
  'e2e/kernel-features.test.js',
  'e2e/drift-and-faults.test.js',
  'e2e/attachment-repair.test.js',
  'e2e/monitor.test.js',
  'e2e/upgrade.test.js',
  'conformance/conntrack.test.js',
  'conformance/service.test.js',
  'conformance/networking.test.js',
  'conformance/kube-proxy.test.js',
  'conformance/traffic-distribution.test.js',
  'conformance/loadbalancer.test.js',
  'conformance/dual-stack.test.js',
];

/**
 * What a slim leg (`--slim 6.1`, or KERNELS_SLIM) leaves out: the conformance
 * files but conntrack.go, and the live-migration suite. CI's budget
 * (.ci/run, 90 minutes on two cores, TCG guests) holds them in one guest
 * leg, not two: CI runs them in the 5.10 leg (the oldest kernel, with the
 * most fallbacks; 6.1 has the same tc and socket-termination fallbacks) and
 * the 6.1 leg slim. `make test-kernels` without KERNELS_SLIM runs every
 * suite on every kernel it names.
 */
export const SLIM_SKIPS = [
  'e2e/upgrade.test.js',
  'conformance/service.test.js',
  'conformance/networking.test.js',
  'conformance/kube-proxy.test.js',
  'conformance/traffic-distribution.test.js',
  'conformance/loadbalancer.test.js',
  'conformance/dual-stack.test.js',
];

/** The suites a leg runs: all of `files`, or on a slim leg those not in SLIM_SKIPS. */
export function legFiles(kernel: string, files: readonly string[], slim: readonly string[]): string[] {
  return slim.includes(kernel) ? files.filter((f) => !SLIM_SKIPS.includes(f)) : [...files];
}

/** What a row of the matrix stands for, and the kernel features its tests lean on (names as agent/datapath/kernel-features.ts). */
export const ROWS: Record<string, { label: string; features: string[] }> = {
  'bpf/layout.test.js': { label: "map layouts = the object's BTF", features: [] },
  'bpf/tc-datapath.test.js': { label: 'tc programs (BPF_PROG_TEST_RUN)', features: [] },
  'bpf/maglev.test.js': { label: 'Maglev selection on the tc path (BPF_PROG_TEST_RUN)', features: [] },
  'bpf/ct-half-flows.test.js': { label: 'conntrack under load: no half-flow below capacity (BPF_PROG_TEST_RUN, a worker per CPU)', features: ['lru-hash'] },
  'bpf/monitor.test.js': { label: 'kpr monitor events, ring buffer (BPF_PROG_TEST_RUN)', features: [] },
  'datapath/udp-terminator.test.js': { label: 'UDP socket termination', features: ['bpf-sock-destroy'] },
  'native/attach.test.js': { label: 'cgroup links (pinned, swapped in place)', features: [] },
  'native/batch-writer.test.js': { label: 'batch writer thread', features: ['batch-map-ops'] },
  'native/bpf-map.test.js': { label: 'maps, batch ops', features: ['batch-map-ops', 'lru-hash'] },
  'native/bpf-object.test.js': { label: 'objects load (verifier)', features: [] },
  'datapath/map-sizes-loader.test.js': { label: 'map sizes, live migration, refused newer layouts', features: [] },
  'native/bpffs-log.test.js': { label: 'bpffs, libbpf log', features: [] },
  'maps/datapath-writer.test.js': { label: 'reconciler over kernel maps', features: ['batch-map-ops'] },
  'reconcile/read-back/drift-repair.test.js': { label: 'drift repair over kernel maps', features: [] },
  'native/sock-diag.test.js': { label: 'netlink sock_diag dump/destroy', features: [] },
  'datapath/tc-attacher.test.js': { label: 'tc attacher (auto, tcx, clsact)', features: ['tcx'] },
  'native/tc-classic.test.js': { label: 'clsact/cls_bpf attach', features: [] },
  'native/tcx.test.js': { label: 'tcx links', features: ['tcx'] },
  'bpf/tc-chain.test.js': { label: 'tc chain: kpr beside another program on the hook', features: ['tcx'] },
  'preflight/preflight.test.js': { label: 'kpr preflight', features: [] },
  'cli/maps.test.js': { label: 'kpr map/service CLI', features: [] },
  'cleanup/kpr-state.test.js': { label: 'kpr cleanup', features: ['tcx'] },
  'e2e/clusterip.test.js': { label: 'ClusterIP e2e', features: ['tcx'] },
  'e2e/semantics.test.js': { label: 'Service semantics e2e', features: ['bpf-sock-destroy'] },
  'e2e/nodeport.test.js': { label: 'NodePort/LB/externalIPs e2e', features: ['tcx'] },
  'e2e/mesh.test.js': { label: 'service-mesh mode e2e', features: ['tcx', 'netns-cookie-sockopt'] },
  'e2e/snat-collision.test.js': { label: "SNAT ports vs the node's own connections e2e", features: [] },

  'e2e/masquerade.test.js': { label: 'pod masquerade and hairpin e2e', features: ['netns-cookie-sockopt'] },
  'e2e/observability.test.js': { label: 'observability e2e', features: [] },
  'e2e/kernel-features.test.js': { label: 'kernel features, netns cookie, recovery e2e', features: ['netns-cookie-sockopt'] },
  'e2e/drift-and-faults.test.js': { label: 'drift repair and node faults e2e', features: [] },
  'e2e/attachment-repair.test.js': { label: 'detached cgroup links and tc attachments repaired, /healthz e2e', features: ['tcx'] },
  'e2e/monitor.test.js': { label: 'kpr monitor e2e', features: ['tcx'] },
  'e2e/upgrade.test.js': { label: 'live map migration under load (size, v1 -> v2, newer refused) e2e', features: ['tcx'] },
  'conformance/conntrack.test.js': { label: 'conformance: conntrack.go', features: ['bpf-sock-destroy'] },
  'conformance/service.test.js': { label: 'conformance: service.go', features: ['tcx'] },
  'conformance/networking.test.js': { label: 'conformance: networking.go', features: ['tcx'] },
  'conformance/kube-proxy.test.js': { label: 'conformance: kube_proxy.go', features: [] },
  'conformance/traffic-distribution.test.js': { label: 'conformance: traffic_distribution.go', features: [] },
  'conformance/loadbalancer.test.js': { label: 'conformance: loadbalancer.go', features: ['tcx'] },
  'conformance/dual-stack.test.js': { label: 'conformance: dual_stack.go', features: ['tcx'] },
};

/** One kernel feature as `kpr preflight -o json` reports it. */
export interface FeatureState {
  name: string;
  state: 'active' | 'fallback' | 'off';
  fallback?: string;
  detail?: string;
}

export interface KernelRun {
  kernel: string;
  release: string;
  finished: boolean;
  seconds: number;
  tests: TestRecord[];
  features: FeatureState[];
  note?: string;
}

export interface Cell {
  status: 'pass' | 'degraded' | 'FAIL' | 'missing';
  passed: number;
  failed: number;
  skipped: number;
  /** Tests skipped as not applicable ("n/a: …", conformance rows): on every kernel, so no degradation. */
  notApplicable: number;
  /** The fallbacks the row's tests ran on, for a degraded cell. */
  fallbacks: string[];
}

/** Reads the preflight report's feature list, whatever its exact shape ({features:[...]} or checks). */
export function featuresOf(report: unknown): FeatureState[] {
  const r = report as { features?: unknown };
  if (!r || !Array.isArray(r.features)) return [];
  return (r.features as Array<Record<string, unknown>>)
    .map((f): Record<string, unknown> => ({ ...f, name: f.feature ?? f.name }))
    .filter((f) => typeof f.name === 'string' && typeof f.state === 'string')
    .map((f) => ({
      name: String(f.name),
      state: f.state as FeatureState['state'],
      fallback: f.fallback ? String(f.fallback) : undefined,
      detail: f.detail ? String(f.detail) : undefined,
    }));
}

/** dist/test/e2e/x.test.js (any absolute prefix) → e2e/x.test.js. */
export function suiteOf(file: string): string {
  const m = /(?:^|\/)dist\/test\/(.+)$/.exec(file);
  return m ? m[1] : path.basename(file);
}

export function cellFor(run: KernelRun, suite: string): Cell {
  const leaves = run.tests.filter((t) => !t.suite && suiteOf(t.file) === suite);
  const suiteFailed = run.tests.some((t) => t.suite && t.status === 'fail' && suiteOf(t.file) === suite && t.nesting === 0);
  const passed = leaves.filter((t) => t.status === 'pass').length;
  const failed = leaves.filter((t) => t.status === 'fail').length + (suiteFailed && leaves.every((t) => t.status !== 'fail') ? 1 : 0);
  const skipped = leaves.filter((t) => t.status === 'skip' && !t.notApplicable).length;
  const notApplicable = leaves.filter((t) => t.status === 'skip' && t.notApplicable).length;
  const wanted = new Set(ROWS[suite]?.features ?? []);
  const fallbacks = run.features
    .filter((f) => wanted.has(f.name) && f.state !== 'active')
    .map((f) => (f.state === 'fallback' ? `${f.name} → ${f.fallback ?? 'fallback'}` : `${f.name} off`));
  if (leaves.length === 0 && !suiteFailed) return { status: 'missing', passed, failed, skipped, notApplicable, fallbacks };
  if (failed > 0) return { status: 'FAIL', passed, failed, skipped, notApplicable, fallbacks };
  return { status: fallbacks.length > 0 || skipped > 0 ? 'degraded' : 'pass', passed, failed, skipped, notApplicable, fallbacks };
}

export function cellText(c: Cell): string {
  const counts = `${c.passed}/${c.passed + c.failed + c.skipped}`;
  if (c.status === 'missing') return 'not run';
  const extra = [...c.fallbacks, ...(c.skipped > 0 ? [`${c.skipped} skipped`] : []), ...(c.notApplicable > 0 ? [`${c.notApplicable} n/a`] : [])];
  return `${c.status} ${counts}${extra.length ? ` (${extra.join('; ')})` : ''}`;
}

function columnName(run: KernelRun): string {
  return run.kernel === 'host' ? `this machine (${run.release})` : `${run.kernel} (${run.release})`;
}

/** The matrix as a markdown table, then the kernel features per kernel, then every failure. */
export function formatMatrix(runs: KernelRun[], suites: string[]): string {
  const lines: string[] = [];
  lines.push(`| feature (suite) | ${runs.map(columnName).join(' | ')} |`);
  lines.push(`| --- | ${runs.map(() => '---').join(' | ')} |`);
  for (const s of suites) {
    lines.push(`| ${ROWS[s]?.label ?? s} (${s.replace(/\.test\.js$/, '')}) | ${runs.map((r) => cellText(cellFor(r, s))).join(' | ')} |`);
  }
  lines.push(`| wall time in the guest | ${runs.map((r) => `${Math.round(r.seconds)} s${r.finished ? '' : ' (did not finish)'}`).join(' | ')} |`);
  const names = [...new Set(runs.flatMap((r) => r.features.map((f) => f.name)))];
  if (names.length > 0) {
    lines.push('', `| kernel feature | ${runs.map(columnName).join(' | ')} |`, `| --- | ${runs.map(() => '---').join(' | ')} |`);
    for (const n of names) {
      lines.push(
        `| ${n} | ${runs
          .map((r) => {
            const f = r.features.find((x) => x.name === n);
            if (!f) return '?';
            return f.state === 'fallback' ? `fallback: ${f.fallback ?? '?'}` : f.state;
          })
          .join(' | ')} |`,
      );
    }
  }
  const failures = runs.flatMap((r) =>
    r.tests
      .filter((t) => t.status === 'fail' && !t.suite)
      .map((t) => `- ${r.kernel}: ${suiteOf(t.file)}: ${t.name}: ${(t.error ?? '').split('\n')[0].slice(0, 300)}`),
  );
  const unfinished = runs.filter((r) => !r.finished).map((r) => `- ${r.kernel}: did not finish (${r.note ?? 'see console.log'})`);
  if (failures.length + unfinished.length > 0) lines.push('', 'Failures:', ...unfinished, ...failures);
  return lines.join('\n') + '\n';
}

function readJsonl(file: string): TestRecord[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as TestRecord];
      } catch {
        return [];
      }
    });
}

/** The script run on each kernel (on this machine, or as the guest's command). */
function guestScript(outDir: string, files: string[]): string {
  const rel = (p: string) => path.relative(repoRoot, p);
  const o = rel(outDir);
  return [
    'set -u',
    `uname -r > ${o}/release`,
    `node dist/kpr.mjs preflight -o json --bpf-object build/kpr_sock.bpf.o > ${o}/preflight.json 2> ${o}/preflight.err || true`,
    `node --test --test-concurrency=1 --test-reporter=spec --test-reporter-destination=${o}/tests.txt ` +
      `--test-reporter=./dist/test/kernels/json-reporter.js --test-reporter-destination=${o}/tests.jsonl ${files.map((f) => `dist/test/${f}`).join(' ')}`,
    '',
  ].join('\n');
}

/** Runs a command to its end; its exit status (null when killed). */
function runToEnd(cmd: string, args: string[]): Promise<{ status: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: repoRoot, stdio: ['ignore', 'inherit', 'inherit'] });
    child.once('error', () => resolve({ status: 127, signal: null }));
    child.once('exit', (status, signal) => resolve({ status, signal }));
  });
}

async function runKernel(kernel: string, outRoot: string, files: string[]): Promise<KernelRun> {
  const outDir = path.join(outRoot, kernel);
  fs.rmSync(outDir, { recursive: true, force: true });
  fs.mkdirSync(outDir, { recursive: true });
  const script = path.join(outDir, 'run.sh');
  fs.writeFileSync(script, guestScript(outDir, files));
  const started = Date.now();
  process.stderr.write(`kpr test-kernels: ${kernel}: running ${files.length} suites…\n`);
  const r =
    kernel === 'host'
      ? await runToEnd('bash', [script])
      : await runToEnd('bash', [path.join(repoRoot, 'test/kernels/vm.sh'), 'run', kernel, outDir, `bash ${path.relative(repoRoot, script)}`]);
  const seconds = (Date.now() - started) / 1000;
  const finished = kernel === 'host' ? r.status !== null : fs.existsSync(path.join(outDir, 'rc'));
  let features: FeatureState[] = [];
  try {
    features = featuresOf(JSON.parse(fs.readFileSync(path.join(outDir, 'preflight.json'), 'utf8')));
  } catch {
    /* preflight printed nothing usable: the feature table says "?" */
  }
  const release = fs.existsSync(path.join(outDir, 'release'))
    ? fs.readFileSync(path.join(outDir, 'release'), 'utf8').trim()
    : kernel === 'host'
      ? os.release()
      : '?';
  const run: KernelRun = { kernel, release, finished, seconds, tests: readJsonl(path.join(outDir, 'tests.jsonl')), features };
  if (!finished) run.note = `exit ${r.status ?? r.signal}; ${path.join(outDir, 'console.log')}`;
  process.stderr.write(
    `kpr test-kernels: ${kernel} (${release}): ${Math.round(seconds)} s, ${run.tests.filter((t) => !t.suite && t.status === 'pass').length} passed, ${run.tests.filter((t) => !t.suite && t.status === 'fail').length} failed\n`,
  );
  return run;
}

/**
 * Runs the legs: this machine's first, alone (its suites time real traffic),
 * then the guests, one after the other or, with `parallel`, all at once. The
 * guests' kernels are fetched first, one at a time (vm.sh's apt cache is
 * shared). Under TCG a guest leaves much of its two vCPUs idle (its tests
 * wait on agents, timeouts and polls), so two guests at once take far less
 * than the sum of their times on this two-core machine.
 */
export async function runLegs(kernels: string[], outRoot: string, files: string[], parallel: boolean, slim: readonly string[] = []): Promise<KernelRun[]> {
  const runs = new Map<string, KernelRun>();
  if (kernels.includes('host')) runs.set('host', await runKernel('host', outRoot, legFiles('host', files, slim)));
  const guests = kernels.filter((k) => k !== 'host');
  if (parallel) {
    for (const k of guests)
      spawnSync('bash', [path.join(repoRoot, 'test/kernels/vm.sh'), 'fetch', k], { cwd: repoRoot, stdio: ['ignore', 'ignore', 'inherit'] });
    for (const r of await Promise.all(guests.map((k) => runKernel(k, outRoot, legFiles(k, files, slim))))) runs.set(r.kernel, r);
  } else {
    for (const k of guests) runs.set(k, await runKernel(k, outRoot, legFiles(k, files, slim)));
  }
  return kernels.map((k) => runs.get(k)!);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      parallel: { type: 'boolean', default: process.env.KPR_KERNELS_PARALLEL === '1' },
      kernels: { type: 'string', default: process.env.KERNELS || ALL_KERNELS.join(',') },
      slim: { type: 'string', default: process.env.KERNELS_SLIM || '' },
      files: { type: 'string', default: '' },
      out: { type: 'string', default: path.join(repoRoot, 'build', 'kernel-matrix') },
    },
  });
  const kernels = values
    .kernels!.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const k of kernels) {
    if (!ALL_KERNELS.includes(k)) throw new Error(`unknown kernel "${k}" (one of ${ALL_KERNELS.join(', ')})`);
  }
  const files = values.files
    ? values.files
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean)
    : KERNEL_SUITES;
  const outRoot = path.resolve(values.out!);
  fs.mkdirSync(outRoot, { recursive: true });
  const slim = values
    .slim!.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const runs = await runLegs(kernels, outRoot, files, values.parallel!, slim);
  const text = formatMatrix(runs, files);
  fs.writeFileSync(path.join(outRoot, 'matrix.md'), text);
  fs.writeFileSync(
    path.join(outRoot, 'matrix.json'),
    JSON.stringify(
      {
        date: new Date().toISOString(),
        kernels: runs.map((r) => ({
          kernel: r.kernel,
          release: r.release,
          finished: r.finished,
          seconds: Math.round(r.seconds),
          features: r.features,
          rows: Object.fromEntries(files.map((f) => [f, cellFor(r, f)])),
        })),
      },
      null,
      2,
    ),
  );
  process.stdout.write('\n' + text);
  const leaves = runs.flatMap((r) => r.tests.filter((t) => !t.suite));
  const failed = leaves.filter((t) => t.status === 'fail').length + runs.filter((r) => !r.finished).length;
  const skipped = leaves.filter((t) => t.status === 'skip' && !t.notApplicable).length;
  const notApplicable = leaves.filter((t) => t.status === 'skip' && t.notApplicable).length;
  process.stdout.write(
    `\nkernels: ${leaves.filter((t) => t.status === 'pass').length} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}${notApplicable ? `, ${notApplicable} n/a` : ''}\n`,
  );
  // A slim leg's skipped files are "not run" in its column, not missing.
  const bad = runs.some((r) => !r.finished || legFiles(r.kernel, files, slim).some((f) => ['FAIL', 'missing'].includes(cellFor(r, f).status)));
  process.exitCode = bad ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
