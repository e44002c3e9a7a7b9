/**
 * The sandbox API server's list responses: the whole collection at the current
 * resourceVersion, or one page of a chunked list (limit/continue) as the real
 * server serves it, from a snapshot at the first page's resourceVersion.
 */
import { ApiError } from './apiserver-status.js';
import type { ResourceDef } from './apiserver-resources.js';
import { selectorMatches, type KubeObject, type Selector } from './apiserver-selectors.js';
import type { Store } from './apiserver-store.js';

function stripForList(o: KubeObject): KubeObject {
  const { kind: _k, apiVersion: _a, ...rest } = o;
  return rest;
}

/** A list continue token, like the real server's: base64 of {"v":"meta.k8s.io/v1","rv":N,"start":"<key>"}. */
function encodeContinue(rv: number, lastKey: string): string {
  return Buffer.from(JSON.stringify({ v: 'meta.k8s.io/v1', rv, start: lastKey })).toString('base64url');
}

function decodeContinue(token: string): { rv: number; start: string } | undefined {
  try {
    const t = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
    if (t?.v !== 'meta.k8s.io/v1' || !Number.isInteger(t.rv) || t.rv < 0 || typeof t.start !== 'string' || t.start === '') return undefined;
    return { rv: t.rv, start: t.start };
  } catch {
    return undefined;
  }
}

export class ListPager {
  /**
   * Recent list snapshots (plural@rv -> sorted keys and states) for paginated lists, so
   * that the pages of one list do not each rebuild and sort the whole collection.
   */
  private readonly snapshots = new Map<string, { keys: string[]; objects: KubeObject[] }>();

  constructor(private readonly store: Store) {}

  private snapshotAt(def: ResourceDef, rv: number): { keys: string[]; objects: KubeObject[] } {
    if (!this.store.canResumeFrom(rv)) return this.store.snapshotAt(def, rv); // throws 410 Expired
    const id = `${def.plural}@${rv}`;
    let snap = this.snapshots.get(id);
    if (!snap) {
      snap = this.store.snapshotAt(def, rv);
      this.snapshots.set(id, snap);
      while (this.snapshots.size > 8) this.snapshots.delete(this.snapshots.keys().next().value!);
    }
    return snap;
  }

  /**
   * One page of a chunked list (limit/continue), like the real API server: every page
   * comes from the snapshot at the first page's resourceVersion; the continue token
   * carries that resourceVersion and the last key served; a token whose
   * resourceVersion is compacted away gets 410 Expired.
   */
  private page(def: ResourceDef, sel: Selector, limit: number, cont: string, q: URLSearchParams): unknown {
    let rv: number;
    let after = '';
    if (cont !== '') {
      const rvParam = q.get('resourceVersion') ?? '';
      if (rvParam !== '' && rvParam !== '0') throw new ApiError(400, 'BadRequest', 'specifying resource version is not allowed when using continue');
      const tok = decodeContinue(cont);
      if (!tok) throw new ApiError(400, 'BadRequest', `invalid continue token: ${cont}`);
      rv = tok.rv;
      after = tok.start;
    } else rv = this.store.currentRv();
    const snap = this.snapshotAt(def, rv);
    // First key strictly after `after` (same order as the snapshot's sort).
    let lo = 0;
    if (after !== '') {
      let hi = snap.keys.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (snap.keys[mid].localeCompare(after) <= 0) lo = mid + 1;
        else hi = mid;
      }
    }
    const items: KubeObject[] = [];
    let i = lo;
    for (; i < snap.objects.length && (limit === 0 || items.length < limit); i++) {
      const o = snap.objects[i];
      if (selectorMatches(sel, o)) items.push(stripForList(o));
    }
    // Like the real server, a full page may end exactly at the last match: the next page is then empty.
    const metadata: Record<string, unknown> = { resourceVersion: String(rv) };
    if (i < snap.objects.length) metadata.continue = encodeContinue(rv, snap.keys[i - 1]);
    return { kind: def.listKind, apiVersion: def.apiVersion, metadata, items };
  }

  /** The list a GET of the collection `def` answers, filtered by `sel`: paged when the query asks for a limit or continues. */
  list(def: ResourceDef, namespace: string | undefined, sel: Selector, q: URLSearchParams): unknown {
    const limit = Number(q.get('limit') ?? '');
    const cont = q.get('continue') ?? '';
    if (cont !== '' || (Number.isInteger(limit) && limit > 0)) return this.page(def, sel, Number.isInteger(limit) && limit > 0 ? limit : 0, cont, q);
    const items = this.store
      .list(def, namespace)
      .filter((o) => selectorMatches(sel, o))
      .map(stripForList);
    return { kind: def.listKind, apiVersion: def.apiVersion, metadata: { resourceVersion: String(this.store.currentRv()) }, items };
  }

  /** Forgets the cached snapshots (the store's history was replaced: their resourceVersions mean other states). */
  clear(): void {
    this.snapshots.clear();
  }
}
