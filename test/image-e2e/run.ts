/**
 * `make test-image`: the chart's pod from the built image, run by podman
 * inside a QEMU guest (test/kernels/vm.sh; this machine's own runtime
 * cannot run it: crun refuses hybrid cgroups). On the host first:
 *  - the chart rendered by the real helm (renderings.ts), every variant;
 *  - the image archive `podman load`ed into an image store under OUT,
 *    which the guest's podman reads as a read-only additional store (a load
 *    inside the emulated guest took over three minutes);
 * then one guest boots (Debian's 6.1 kernel by default, the one CI's kernel
 * legs already fetch; kpr.bpffs=0: no bpffs on /sys/fs/bpf) and runs
 * dist/test/image-e2e/chart-pod.test.js, one test per step. Prints each step's
 * result and time; exits 1 when a step failed, was missing, or the guest
 * did not finish.
 *
 *   node dist/test/image-e2e/run.js [--image ARCHIVE (default: build/image/image.json's, this architecture)]
 *     [--kernel 6.1] [--out build/image-test] [--only REGEX]
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { repoRoot } from '../../sandbox/repo.js';
import type { TestRecord } from '../kernels/json-reporter.js';
import { VARIANTS, renderVariant, writeRendering, type Variant } from '../image/renderings.js';

/** The steps chart-pod.test.ts reports, by their number. */
export const STEPS = ['1.', '2.', '3.', '4.', '5.', '6.', '7.', '8.', '8b.'];

function packageVersion(): string {
  return (JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version;
}

/** Loads the archive into an image store of its own (overlay driver), tagged `ref`. */
export function prepareImageStore(archive: string, storeDir: string, ref: string): void {
  rmSync(storeDir, { recursive: true, force: true });
  const runroot = `/tmp/kpr-image-test-run-${process.pid}`;
  const podman = (...args: string[]) => {
    const r = spawnSync(
      'podman',
      ['--root', path.join(storeDir, 'root'), '--runroot', runroot, '--storage-driver', 'overlay', '--events-backend', 'none', ...args],
      { encoding: 'utf8' },
    );
    if (r.status !== 0) throw new Error(`podman ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  try {
    const out = podman('load', '-q', '-i', archive);
    const loaded = /Loaded image(?:\(s\))?:\s*(\S+)/.exec(out)?.[1];
    if (!loaded) throw new Error(`podman load ${archive}: no image named in ${JSON.stringify(out)}`);
    if (loaded !== ref) podman('tag', loaded, ref);
    process.stderr.write(`kpr test-image: ${archive} loaded into ${storeDir} as ${ref}\n`);
  } finally {
    rmSync(runroot, { recursive: true, force: true });
  }
}

function readJsonl(file: string): TestRecord[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
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

/** What `make image` wrote (build/image/image.json): the image's name, its commit, this architecture's archive. */
function builtImage(): { ref: string; revision: string; archive: string } | undefined {
  const file = path.join(repoRoot, 'build', 'image', 'image.json');
  if (!existsSync(file)) return undefined;
  const s = JSON.parse(readFileSync(file, 'utf8')) as { image: string; revision: string; arches: Record<string, { archive: string }> };
  const arch = process.arch === 'x64' ? 'amd64' : process.arch;
  const a = s.arches[arch];
  return a ? { ref: s.image, revision: s.revision, archive: a.archive } : undefined;
}

function main(): void {
  const version = packageVersion();
  const built = builtImage();
  const { values } = parseArgs({
    options: {
      image: { type: 'string', default: built?.archive ?? path.join(repoRoot, 'build', 'image', `kpr-${version}-amd64.oci.tar`) },
      kernel: { type: 'string', default: process.env.KPR_IMAGE_TEST_KERNEL ?? '6.1' },
      out: { type: 'string', default: path.join(repoRoot, 'build', 'image-test') },
      only: { type: 'string', default: '' },
    },
  });
  const archive = path.resolve(values.image!);
  const out = path.resolve(values.out!);
  if (!existsSync(archive)) throw new Error(`${archive} missing: run \`make image\` first`);
  if (!out.startsWith(`${repoRoot}/`)) throw new Error(`--out must lie in the checkout (the guest sees it read-only): ${out}`);
  const started = Date.now();
  mkdirSync(path.join(out, 'chart'), { recursive: true });
  // The chart points at the image by repository and tag, as an operator's values do.
  const ref = built?.ref ?? `localhost/kpr:${version}`;
  const [repository, tag] = [ref.slice(0, ref.lastIndexOf(':')), ref.slice(ref.lastIndexOf(':') + 1)];
  for (const v of Object.keys(VARIANTS) as Variant[])
    writeFileSync(path.join(out, 'chart', `${v}.yaml`), writeRendering(renderVariant(v, { repository, tag })));
  prepareImageStore(archive, path.join(out, 'store'), ref);
  const commit = built?.revision || 'unknown';
  writeFileSync(path.join(out, 'image.json'), JSON.stringify({ ref, version, commit }));
  const guest = path.join(out, 'guest');
  rmSync(guest, { recursive: true, force: true });
  mkdirSync(guest, { recursive: true });
  const rel = (p: string) => path.relative(repoRoot, p);
  writeFileSync(
    path.join(guest, 'run.sh'),
    [
      'set -u',
      `uname -r > ${rel(guest)}/release`,
      // podman writes below /var/cache; the rest of the root is the host's, read-only.
      'mount -t tmpfs tmpfs /var/cache',
      `export KPR_IMAGE_TEST_DIR=${out}`,
      `${process.execPath} --test --test-concurrency=1 ${values.only ? `--test-name-pattern=${JSON.stringify(values.only)} ` : ''}--test-reporter=spec --test-reporter-destination=${rel(guest)}/tests.txt ` +
        `--test-reporter=./dist/test/kernels/json-reporter.js --test-reporter-destination=${rel(guest)}/tests.jsonl dist/test/image-e2e/chart-pod.test.js`,
      '',
    ].join('\n'),
  );
  const prep = (Date.now() - started) / 1000;
  process.stderr.write(`kpr test-image: host preparation ${Math.round(prep)} s; booting the ${values.kernel} guest…\n`);
  const bootAt = Date.now();
  const r = spawnSync('bash', [path.join(repoRoot, 'test', 'kernels', 'vm.sh'), 'run', values.kernel!, guest, `bash ${rel(guest)}/run.sh`], {
    cwd: repoRoot,
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, KPR_VM_BPFFS: '0', KPR_VM_TIMEOUT: process.env.KPR_VM_TIMEOUT ?? '1800' },
  });
  const guestSeconds = (Date.now() - bootAt) / 1000;
  const finished = existsSync(path.join(guest, 'rc'));
  const records = readJsonl(path.join(guest, 'tests.jsonl')).filter((t) => !t.suite);
  const release = existsSync(path.join(guest, 'release')) ? readFileSync(path.join(guest, 'release'), 'utf8').trim() : '?';
  const lines = [
    `make test-image: kernel ${values.kernel} (${release}), guest wall time ${Math.round(guestSeconds)} s (host preparation ${Math.round(prep)} s)`,
  ];
  for (const t of records)
    lines.push(
      `  ${t.status === 'pass' ? 'pass' : t.status === 'skip' ? 'SKIP' : 'FAIL'}  ${(t.ms / 1000).toFixed(1).padStart(6)} s  ${t.name}${t.status === 'fail' && t.error ? `\n          ${t.error.split('\n')[0].slice(0, 400)}` : ''}`,
    );
  const wanted = values.only ? [] : STEPS;
  const missing = wanted.filter((s) => !records.some((t) => t.name.startsWith(`${s} `)));
  for (const s of missing) lines.push(`  MISSING step ${s} (see ${rel(guest)}/tests.txt and console.log)`);
  if (!finished) lines.push(`  the guest did not finish (exit ${r.status ?? r.signal}); see ${rel(guest)}/console.log`);
  const failed = records.filter((t) => t.status !== 'pass').length + missing.length + (finished ? 0 : 1) + (records.length === 0 ? 1 : 0);
  lines.push(`${records.filter((t) => t.status === 'pass').length} passed, ${failed} failed`);
  process.stdout.write(lines.join('\n') + '\n');
  writeFileSync(path.join(out, 'summary.txt'), lines.join('\n') + '\n');
  process.exitCode = failed > 0 ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) main();
