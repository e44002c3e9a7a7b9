/**
 * A reflector's cache (objectKey -> typed, pruned object) and the way raw
 * objects enter it: each raw object (list item or watch event) goes through
 * the validation hook, then ObjectSerializer.deserialize and the pruner; an
 * object either rejects or fails to convert is treated as absent (removed
 * from the cache, with a delete change, if it was there) and logged once per
 * version. Every change is told to the handlers; a handler that throws is
 * logged and never stops the reflector.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
// Not re-exported by the package index; used to give raw JSON the typed shape (Date timestamps etc.)
// client-node's models have. The package has no "exports" map.
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { flatKey } from '../runtime/flat-key.js';

export interface ReflectorLogger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  debug(msg: string, fields?: Record<string, unknown>): void;
}

export interface Rejection {
  field: string;
  reason: string;
}

export type Validator = (raw: unknown) => Rejection | undefined;

export interface ReflectorHandlers<T> {
  add(o: T): void;
  update(o: T, old: T): void;
  delete(o: T): void;
}

export interface ReflectorCacheOptions<T extends KubernetesObject> {
  /** For logs ("Service", "EndpointSlice", "Node"). */
  kind: string;
  /** client-node model name, e.g. "V1Service". */
  typeName: string;
  prune: (o: T) => T;
  validate?: Validator;
  log: ReflectorLogger;
  handlers: ReflectorHandlers<T>;
  onRejected?: (rejection: Rejection) => void;
  /** The reflector was stopped: handlers are no longer told. */
  stopped: () => boolean;
}

export function keyOf(o: { metadata?: { namespace?: string; name?: string } } | undefined): string {
  const ns = o?.metadata?.namespace;
  const name = o?.metadata?.name ?? '';
  return ns ? flatKey('/', ns, name) : name;
}

const MAX_LOGGED_CHARS = 200;

function truncate(s: string): string {
  return s.length > MAX_LOGGED_CHARS ? `${s.slice(0, MAX_LOGGED_CHARS)}…` : s;
}

/**
 * Everything but the resourceVersion, to tell a relisted object that did not
 * change. A cached object may hold fields its properties do not show (a
 * packed EndpointSlice's endpoints): its toJSON says what it holds.
 */
function sameContent(a: KubernetesObject, b: KubernetesObject): boolean {
  const strip = (o: KubernetesObject) => {
    const plain = typeof (o as { toJSON?: unknown }).toJSON === 'function' ? (o as { toJSON(): KubernetesObject }).toJSON() : o;
    return { ...plain, metadata: { ...plain.metadata, resourceVersion: undefined } };
  };
  return JSON.stringify(strip(a)) === JSON.stringify(strip(b));
}

export class ReflectorCache<T extends KubernetesObject> {
  private readonly cache = new Map<string, T>();
  /** key -> resourceVersion of the rejected version last logged, so each version is logged once. */
  private readonly rejected = new Map<string, string>();

  constructor(private readonly o: ReflectorCacheOptions<T>) {}

  get size(): number {
    return this.cache.size;
  }

  get(key: string): T | undefined {
    return this.cache.get(key);
  }

  /** Makes the cache the list: adds, updates (changed objects only) and the deletes the list implies. */
  replace(items: T[], rejectedKeys: Set<string>, newHistory: boolean): { added: number; updated: number; deleted: number } {
    let added = 0;
    let updated = 0;
    let deleted = 0;
    const listed = new Set<string>();
    const adds: T[] = [];
    const updates: Array<[T, T]> = [];
    for (const obj of items) {
      const key = keyOf(obj);
      listed.add(key);
      const old = this.cache.get(key);
      if (!old) adds.push(obj);
      else {
        const sameRv = old.metadata?.resourceVersion !== undefined && old.metadata.resourceVersion === obj.metadata?.resourceVersion;
        if (sameRv && !newHistory) continue;
        if (sameContent(old, obj)) {
          this.cache.set(key, obj); // only its resourceVersion moved: nothing to tell
          continue;
        }
        updates.push([obj, old]);
      }
    }
    // Deletes first: what left the cluster leaves the cache before anything new arrives.
    for (const [key, old] of [...this.cache]) {
      if (listed.has(key)) continue;
      this.cache.delete(key);
      deleted++;
      this.safely('delete', () => this.o.handlers.delete(old));
    }
    for (const key of [...this.rejected.keys()]) if (!rejectedKeys.has(key)) this.rejected.delete(key);
    for (const obj of adds) {
      this.cache.set(keyOf(obj), obj);
      added++;
      this.safely('add', () => this.o.handlers.add(obj));
    }
    for (const [obj, old] of updates) {
      this.cache.set(keyOf(obj), obj);
      updated++;
      this.safely('update', () => this.o.handlers.update(obj, old));
    }
    return { added, updated, deleted };
  }

  upsert(raw: any): void {
    const t = this.convert(raw);
    if (!t.ok) {
      // Treated as absent: a rejected new version of a cached object is its deletion.
      const old = this.cache.get(t.key);
      if (old) {
        this.cache.delete(t.key);
        this.safely('delete', () => this.o.handlers.delete(old));
      }
      return;
    }
    const key = keyOf(t.obj);
    const old = this.cache.get(key);
    if (old && old.metadata?.resourceVersion !== undefined && old.metadata.resourceVersion === t.obj.metadata?.resourceVersion) return;
    this.cache.set(key, t.obj);
    if (old) this.safely('update', () => this.o.handlers.update(t.obj, old));
    else this.safely('add', () => this.o.handlers.add(t.obj));
  }

  deleted(key: string, raw: any): void {
    this.rejected.delete(key);
    const old = this.cache.get(key);
    if (!old) return;
    this.cache.delete(key);
    let last: T = old;
    try {
      last = this.toTyped(raw);
    } catch {
      // the cached state is the last one we can name
    }
    this.safely('delete', () => this.o.handlers.delete(last));
  }

  private toTyped(raw: any): T {
    const model = raw && raw.constructor === Object ? (ObjectSerializer.deserialize(raw, this.o.typeName, '') as T) : (raw as T);
    return this.o.prune(model);
  }

  /** Validates and types one raw object; a rejection is logged once per object version. */
  convert(raw: any): { ok: true; obj: T } | { ok: false; key: string } {
    const key = keyOf(raw);
    let rejection: Rejection | undefined;
    if (raw === null || typeof raw !== 'object' || typeof raw.metadata?.name !== 'string' || raw.metadata.name === '') {
      rejection = { field: 'metadata.name', reason: 'missing' };
    } else {
      try {
        rejection = this.o.validate?.(raw);
      } catch (e) {
        rejection = { field: '?', reason: `validator failed: ${(e as Error)?.message ?? String(e)}` };
      }
    }
    if (!rejection) {
      try {
        const obj = this.toTyped(raw);
        this.rejected.delete(key);
        return { ok: true, obj };
      } catch (e) {
        rejection = { field: '?', reason: (e as Error)?.message ?? String(e) };
      }
    }
    const rv = String(raw?.metadata?.resourceVersion ?? '');
    if (!this.rejected.has(key) || this.rejected.get(key) !== rv) {
      this.rejected.set(key, rv);
      this.o.log.warn('k8s object rejected; treated as absent', {
        kind: this.o.kind,
        object: truncate(key),
        resourceVersion: truncate(rv),
        field: truncate(String(rejection.field)),
        reason: truncate(String(rejection.reason)),
      });
      this.o.onRejected?.(rejection);
    }
    return { ok: false, key };
  }

  private safely(verb: string, fn: () => void): void {
    if (this.o.stopped()) return;
    try {
      fn();
    } catch (e) {
      this.o.log.error('k8s event handler failed', { kind: this.o.kind, verb, error: String((e as Error)?.stack ?? e) });
    }
  }
}
