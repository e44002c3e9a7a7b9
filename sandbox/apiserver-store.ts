/**
 * The sandbox API server's storage: objects per resource, one global
 * resourceVersion counter (like etcd's revision), a bounded event history for
 * watch resumption, and apiserver-like defaulting for Services
 * (apiserver-service-defaults.ts).
 */
import { randomUUID } from 'node:crypto';
import type { KubeObject } from './apiserver-selectors.js';
import { RESOURCES, type ResourceDef } from './apiserver-resources.js';
import { ApiError, type StatusObject } from './apiserver-status.js';
import { ServiceDefaults } from './apiserver-service-defaults.js';

export type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface StoreEvent {
  rv: number;
  def: ResourceDef;
  type: EventType;
  /** The new state (for DELETED: the last state, carrying the deletion's resourceVersion). */
  object: KubeObject;
  /**
   * The state before a MODIFIED event (needed to turn selector transitions into ADDED/DELETED),
   * or before a DELETED one (to rebuild past states for paginated lists).
   */
  prev?: KubeObject;
}

function clone<T>(v: T): T {
  return structuredClone(v);
}

function nowTimestamp(): string {
  return new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function objectKey(ns: string | undefined, name: string): string {
  return ns ? `${ns}/${name}` : name;
}

/** Strips the fields the server owns, to compare two states for a no-op update. */
function comparable(o: KubeObject): string {
  const c = clone(o);
  if (c.metadata) {
    delete c.metadata.resourceVersion;
    delete c.metadata.managedFields;
    delete c.metadata.generation;
  }
  return JSON.stringify(c);
}

function randomSuffix(n: number): string {
  const alphabet = 'bcdfghjklmnpqrstvwxz2456789';
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[Math.floor(Math.random() * alphabet.length)];
  return s;
}

export interface StoreOptions {
  historyLimit: number;
  /** First address of the ClusterIP range (IPv4), e.g. "198.19.0.0/16". */
  serviceCIDR?: string;
}

export class Store {
  private rv = 0;
  private readonly objects = new Map<string, Map<string, KubeObject>>();
  private history: StoreEvent[] = [];
  /** Highest resourceVersion whose event is no longer retained: watches from below it get 410. */
  private compactedRv = 0;
  /** Inside replaceHistory's edit: changes record and publish no event. */
  private silent = false;
  private readonly listeners = new Set<(ev: StoreEvent) => void>();
  private readonly serviceDefaults: ServiceDefaults;

  constructor(private readonly opts: StoreOptions) {
    for (const r of RESOURCES) this.objects.set(r.plural, new Map());
    this.serviceDefaults = new ServiceDefaults(opts.serviceCIDR, () => this.objects.get('services')!.values());
  }

  currentRv(): number {
    return this.rv;
  }

  oldestAvailableRv(): number {
    return this.compactedRv + 1;
  }

  /** Whether a watch may resume after `rv` (every event newer than it is retained). */
  canResumeFrom(rv: number): boolean {
    return rv >= this.compactedRv;
  }

  /** Retained events newer than `rv`, oldest first. */
  eventsAfter(rv: number): StoreEvent[] {
    return this.history.filter((e) => e.rv > rv);
  }

  /**
   * Starts a new history, as an API server restored from an etcd backup (or a new etcd)
   * does: every stored object gets a new resourceVersion from `base` + 1 on (in key
   * order), `edit` then changes the objects without recording or publishing any event (a
   * removal leaves no DELETED anywhere), and the retained history is emptied. Watches may
   * resume from `base` on: an older resourceVersion gets 410 Gone; a newer one than the
   * current (the old history's, when `base` is below it) is served as if valid, as a
   * server that cannot tell it from another history's.
   */
  replaceHistory(base: number, edit?: () => void): void {
    if (!Number.isInteger(base) || base < 0) throw new Error(`invalid resourceVersion base: ${base}`);
    this.history = [];
    this.rv = base;
    for (const r of RESOURCES) {
      const map = this.objects.get(r.plural)!;
      for (const key of [...map.keys()].sort((a, b) => a.localeCompare(b))) {
        const o = clone(map.get(key)!);
        o.metadata!.resourceVersion = String(++this.rv);
        map.set(key, o);
      }
    }
    this.silent = true;
    try {
      edit?.();
    } finally {
      this.silent = false;
    }
    this.history = [];
    this.compactedRv = base;
  }

  /** Drops all retained history: every watch resuming from an older RV gets 410 Gone. */
  compact(): void {
    this.history = [];
    this.compactedRv = this.rv;
  }

  subscribe(fn: (ev: StoreEvent) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  list(def: ResourceDef, namespace?: string): KubeObject[] {
    const all = [...this.objects.get(def.plural)!.values()];
    const items = namespace === undefined ? all : all.filter((o) => o.metadata?.namespace === namespace);
    items.sort((a, b) => objectKey(a.metadata?.namespace, a.metadata!.name!).localeCompare(objectKey(b.metadata?.namespace, b.metadata!.name!)));
    return items.map(clone);
  }

  /**
   * The objects of `def` as of resourceVersion `rv` (<= the current one), sorted
   * like list() and not cloned (stored states are never mutated in place), with
   * their keys. Rebuilt from the current state by undoing the retained events
   * newer than `rv`; throws 410 Expired when those are no longer all retained
   * (like etcd after compaction). Used for paginated lists (limit/continue).
   */
  snapshotAt(def: ResourceDef, rv: number): { keys: string[]; objects: KubeObject[] } {
    if (!Number.isInteger(rv) || rv > this.rv) throw new ApiError(400, 'BadRequest', `invalid resource version: ${rv}`);
    if (!this.canResumeFrom(rv)) {
      throw new ApiError(
        410,
        'Expired',
        'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.',
      );
    }
    const state = new Map(this.objects.get(def.plural)!);
    for (let i = this.history.length - 1; i >= 0 && this.history[i].rv > rv; i--) {
      const ev = this.history[i];
      if (ev.def !== def) continue;
      const key = objectKey(ev.object.metadata?.namespace, ev.object.metadata!.name!);
      if (ev.type === 'ADDED') state.delete(key);
      else state.set(key, ev.prev!);
    }
    const keys = [...state.keys()].sort((a, b) => a.localeCompare(b));
    return { keys, objects: keys.map((k) => state.get(k)!) };
  }

  get(def: ResourceDef, namespace: string | undefined, name: string): KubeObject {
    const o = this.objects.get(def.plural)!.get(objectKey(def.namespaced ? namespace : undefined, name));
    if (!o) throw this.notFound(def, name);
    return clone(o);
  }

  tryGet(def: ResourceDef, namespace: string | undefined, name: string): KubeObject | undefined {
    const o = this.objects.get(def.plural)!.get(objectKey(def.namespaced ? namespace : undefined, name));
    return o ? clone(o) : undefined;
  }

  create(def: ResourceDef, input: KubeObject, pathNamespace?: string): KubeObject {
    const obj = this.normalize(def, input, pathNamespace);
    const md = obj.metadata!;
    if (!md.name) {
      if (md.generateName) md.name = `${md.generateName}${randomSuffix(5)}`;
      else
        throw new ApiError(422, 'Invalid', `${def.kind} "" is invalid: metadata.name: Required value: name or generateName is required`, {
          kind: def.plural,
          group: def.group || undefined,
        });
    }
    // kube-apiserver's storage refuses this before it looks for the key, with a plain error: 500, no reason.
    if (md.resourceVersion) throw new ApiError(500, '', 'resourceVersion should not be set on objects to be created');
    const map = this.objects.get(def.plural)!;
    const key = objectKey(md.namespace, md.name);
    if (map.has(key)) {
      throw new ApiError(409, 'AlreadyExists', `${def.plural}${def.group ? '.' + def.group : ''} "${md.name}" already exists`, this.details(def, md.name));
    }
    // The server's own fields: set here whatever the request said (a DaemonSet's status too, as its create strategy does).
    delete md.deletionTimestamp;
    md.uid = randomUUID();
    md.creationTimestamp = nowTimestamp();
    md.generation = 1;
    if (def.kind === 'DaemonSet') delete obj.status;
    if (def.kind === 'Service') this.serviceDefaults.apply(obj, undefined);
    md.resourceVersion = String(++this.rv);
    map.set(key, obj);
    this.record({ rv: this.rv, def, type: 'ADDED', object: clone(obj) });
    return clone(obj);
  }

  /** Replaces an object (PUT). With metadata.resourceVersion set, it must match (optimistic concurrency). */
  update(def: ResourceDef, input: KubeObject, pathNamespace?: string, pathName?: string, subresource?: 'status'): KubeObject {
    const obj = this.normalize(def, input, pathNamespace);
    const md = obj.metadata!;
    if (pathName !== undefined && md.name !== pathName) {
      throw new ApiError(400, 'BadRequest', `the name of the object (${md.name}) does not match the name on the URL (${pathName})`);
    }
    if (!md.name) throw new ApiError(422, 'Invalid', `${def.kind} "" is invalid: metadata.name: Required value: name is required`);
    const map = this.objects.get(def.plural)!;
    const key = objectKey(md.namespace, md.name);
    const old = map.get(key);
    if (!old) throw this.notFound(def, md.name);
    if (md.resourceVersion && md.resourceVersion !== old.metadata!.resourceVersion) {
      throw new ApiError(
        409,
        'Conflict',
        `Operation cannot be fulfilled on ${def.plural}${def.group ? '.' + def.group : ''} "${md.name}": the object has been modified; please apply your changes to the latest version and try again`,
        this.details(def, md.name),
      );
    }
    let next: KubeObject;
    if (subresource === 'status') {
      next = clone(old);
      next.status = obj.status;
    } else {
      next = obj;
      if (old.status !== undefined && def.kind !== 'EndpointSlice') next.status = obj.status ?? clone(old.status);
    }
    // Server-owned metadata survives a replace.
    next.metadata!.uid = old.metadata!.uid;
    next.metadata!.creationTimestamp = old.metadata!.creationTimestamp;
    next.metadata!.resourceVersion = old.metadata!.resourceVersion;
    next.metadata!.generation = old.metadata!.generation;
    if (def.kind === 'Service') this.serviceDefaults.apply(next, old);
    if (comparable(next) === comparable(old)) return clone(old); // no-op: no new resourceVersion, no event
    if (JSON.stringify(next.spec ?? null) !== JSON.stringify(old.spec ?? null)) next.metadata!.generation = (old.metadata!.generation ?? 1) + 1;
    next.metadata!.resourceVersion = String(++this.rv);
    map.set(key, next);
    this.record({ rv: this.rv, def, type: 'MODIFIED', object: clone(next), prev: clone(old) });
    return clone(next);
  }

  remove(def: ResourceDef, namespace: string | undefined, name: string): KubeObject {
    const map = this.objects.get(def.plural)!;
    const key = objectKey(def.namespaced ? namespace : undefined, name);
    const old = map.get(key);
    if (!old) throw this.notFound(def, name);
    map.delete(key);
    const last = clone(old);
    last.metadata!.resourceVersion = String(++this.rv);
    this.record({ rv: this.rv, def, type: 'DELETED', object: clone(last), prev: old });
    return last;
  }

  notFound(def: ResourceDef, name: string): ApiError {
    return new ApiError(404, 'NotFound', `${def.plural}${def.group ? '.' + def.group : ''} "${name}" not found`, this.details(def, name));
  }

  private details(def: ResourceDef, name: string): StatusObject['details'] {
    const d: StatusObject['details'] = { name, kind: def.plural };
    if (def.group) d.group = def.group;
    return d;
  }

  private record(ev: StoreEvent): void {
    if (this.silent) return;
    this.history.push(ev);
    while (this.history.length > this.opts.historyLimit) {
      const dropped = this.history.shift()!;
      this.compactedRv = dropped.rv;
    }
    for (const l of [...this.listeners]) l(ev);
  }

  private normalize(def: ResourceDef, input: KubeObject, pathNamespace?: string): KubeObject {
    if (input === null || typeof input !== 'object' || Array.isArray(input)) {
      throw new ApiError(400, 'BadRequest', 'the body of the request was not a Kubernetes object');
    }
    if (input.kind !== undefined && input.kind !== def.kind) {
      throw new ApiError(400, 'BadRequest', `the kind of the object (${input.kind}) does not match the resource (${def.kind})`);
    }
    if (input.apiVersion !== undefined && input.apiVersion !== def.apiVersion) {
      throw new ApiError(400, 'BadRequest', `the API version of the object (${input.apiVersion}) does not match the resource (${def.apiVersion})`);
    }
    const obj: KubeObject = { apiVersion: def.apiVersion, kind: def.kind, ...clone(input) };
    obj.kind = def.kind;
    obj.apiVersion = def.apiVersion;
    obj.metadata = obj.metadata ?? {};
    const md = obj.metadata!;
    if (def.namespaced) {
      const ns = md.namespace || pathNamespace || 'default';
      if (pathNamespace !== undefined && md.namespace && md.namespace !== pathNamespace) {
        throw new ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
      }
      md.namespace = ns;
    } else {
      delete md.namespace;
    }
    return obj;
  }
}
