/**
 * The verifier's cost of every kpr program on the running kernel: the
 * "processed N insns" line of each program's verifier log (log level 1, as
 * `bpftool -d` asks), for the objects of this build and, with --base,
 * another build's objects beside them. Nothing is attached: each object is
 * loaded into a pin directory of its own under /sys/fs/bpf, which is
 * removed afterwards. Needs root (BPF) and bpftool.
 *
 *   make build && node dist/bench/verifier-cost.js [--base OTHER/build]
 *
 * The count grows with the paths the verifier walks (every state that
 * reaches an instruction), so it is what a datapath change costs at load
 * time and how far the programs are from the kernel's 1,000,000 limit.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ensureBpffs } from '../native/index.js';
import { newRunId } from '../sandbox/netns.js';
import { repoRoot } from '../sandbox/repo.js';

const { values } = parseArgs({ options: { base: { type: 'string' } } });

/** Program name -> processed instructions, for every program of one object. */
function verifierCost(object: string): Map<string, number> {
  const dir = ensureBpffs(path.join('/sys/fs/bpf', newRunId('kpr-bench-verifier')));
  const log = path.join(os.tmpdir(), `${path.basename(dir)}.log`);
  const fd = openSync(log, 'w');
  try {
    // bpftool writes libbpf's log, and so the verifier's (tens of MB for the tc programs), to stderr.
    const r = spawnSync('bpftool', ['-d', 'prog', 'loadall', object, path.join(dir, 'progs')], { stdio: ['ignore', 'ignore', fd] });
    const text = readFileSync(log, 'utf8');
    if (r.status !== 0) throw new Error(`${object} does not load (${r.error?.message ?? `exit ${r.status}`}):\n${text.split('\n').slice(-30).join('\n')}`);
    return parseLogs(text);
  } finally {
    closeSync(fd);
    rmSync(log, { force: true });
    rmSync(dir, { recursive: true, force: true });
  }
}

function parseLogs(log: string): Map<string, number> {
  const costs = new Map<string, number>();
  let prog: string | undefined;
  for (const line of log.split('\n')) {
    const begin = /prog '([^']+)': -- BEGIN PROG LOAD LOG --/.exec(line);
    if (begin) prog = begin[1];
    const processed = /^processed (\d+) insns/.exec(line);
    if (processed && prog) {
      costs.set(prog, Number(processed[1]));
      prog = undefined;
    }
  }
  return costs;
}

function objectsIn(dir: string): string[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.bpf.o'))
    .sort()
    .map((f) => path.join(dir, f));
}

function main(): void {
  if (process.getuid?.() !== 0) throw new Error('needs root (BPF)');
  const ours = objectsIn(path.join(repoRoot, 'build'));
  const rows: string[] = [];
  const json: Record<string, { insns: number; base?: number }> = {};
  for (const object of ours) {
    const name = path.basename(object);
    const cost = verifierCost(object);
    const baseObject = values.base ? path.join(values.base, name) : undefined;
    const base = baseObject && existsSync(baseObject) ? verifierCost(baseObject) : undefined;
    for (const [prog, insns] of [...cost].sort(([a], [b]) => a.localeCompare(b))) {
      const b = base?.get(prog);
      json[prog] = { insns, ...(b !== undefined ? { base: b } : {}) };
      const delta = b !== undefined ? `  ${String(b).padStart(9)}  ${((100 * (insns - b)) / b).toFixed(2).padStart(7)}%` : '';
      rows.push(`  ${name.padEnd(22)} ${prog.padEnd(22)} ${String(insns).padStart(9)}${delta}`);
    }
  }
  const head = `  ${'object'.padEnd(22)} ${'program'.padEnd(22)} ${'processed'.padStart(9)}${values.base ? `  ${'base'.padStart(9)}  ${'change'.padStart(8)}` : ''}`;
  const kernel = execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim();
  process.stdout.write(`verifier: processed instructions per program (kernel ${kernel})\n${head}\n${rows.join('\n')}\n${JSON.stringify(json)}\n`);
}

main();
