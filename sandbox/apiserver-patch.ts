/**
 * The patch types the sandbox API server applies: JSON merge patch (RFC 7386,
 * also what it does for a strategic merge patch) and JSON patch (RFC 6902, a
 * list of operations on RFC 6901 pointers). Pure: documents in, document or
 * ApiError out, with kube-apiserver's status codes (an undecodable patch 400,
 * an operation that cannot apply 422).
 */
import { ApiError } from './apiserver-status.js';

/** RFC 7386 JSON merge patch. */
export function mergePatch(target: any, patch: any): any {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out = target !== null && typeof target === 'object' && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

interface Operation {
  op: string;
  path: string;
  from?: string;
  value?: unknown;
}

const invalid = (message: string) => new ApiError(422, 'Invalid', message);

/** The reference tokens of an RFC 6901 pointer ("" is the whole document). */
function tokens(pointer: string): string[] {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) throw invalid(`invalid JSON pointer "${pointer}"`);
  return pointer
    .slice(1)
    .split('/')
    .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function isContainer(v: unknown): v is Record<string, unknown> | unknown[] {
  return v !== null && typeof v === 'object';
}

/** The container that holds the pointer's last token, and that token. */
function parentOf(doc: unknown, pointer: string): { parent: Record<string, unknown> | unknown[]; key: string } {
  const t = tokens(pointer);
  if (t.length === 0) throw invalid('the whole document cannot be the target of this operation');
  let cur: unknown = doc;
  for (const k of t.slice(0, -1)) {
    if (!isContainer(cur) || !Object.hasOwn(cur, k)) throw invalid(`doc is missing path: "${pointer}": missing value`);
    cur = (cur as Record<string, unknown>)[k];
  }
  if (!isContainer(cur)) throw invalid(`doc is missing path: "${pointer}": missing value`);
  return { parent: cur, key: t[t.length - 1] };
}

function arrayIndex(arr: unknown[], key: string, pointer: string, forInsert: boolean): number {
  if (forInsert && key === '-') return arr.length;
  if (!/^(0|[1-9]\d*)$/.test(key) || Number(key) > arr.length - (forInsert ? 0 : 1))
    throw invalid(`unable to access invalid index: ${key} (path "${pointer}")`);
  return Number(key);
}

function get(doc: unknown, pointer: string): unknown {
  let cur = doc;
  for (const k of tokens(pointer)) {
    if (!isContainer(cur) || !Object.hasOwn(cur, k)) throw invalid(`doc is missing path: "${pointer}": missing value`);
    cur = (cur as Record<string, unknown>)[k];
  }
  return cur;
}

function remove(doc: unknown, pointer: string): unknown {
  const { parent, key } = parentOf(doc, pointer);
  if (Array.isArray(parent)) return parent.splice(arrayIndex(parent, key, pointer, false), 1)[0];
  if (!Object.hasOwn(parent, key)) throw invalid(`unable to remove nonexistent key: ${key}: missing value`);
  const old = parent[key];
  delete parent[key];
  return old;
}

function add(doc: unknown, pointer: string, value: unknown): unknown {
  if (pointer === '') return value;
  const { parent, key } = parentOf(doc, pointer);
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, key, pointer, true), 0, value);
  else parent[key] = value;
  return doc;
}

/** RFC 6902 JSON patch: the operations applied in order to a copy of `target`. */
export function jsonPatch(target: unknown, patch: unknown): any {
  if (!Array.isArray(patch)) throw new ApiError(400, 'BadRequest', 'json: cannot unmarshal object into Go value of type jsonpatch.Patch');
  let doc = structuredClone(target);
  for (const o of patch as Operation[]) {
    if (o === null || typeof o !== 'object' || typeof o.path !== 'string')
      throw new ApiError(400, 'BadRequest', `invalid JSON patch operation: ${JSON.stringify(o)}`);
    const value = () => {
      if (!Object.hasOwn(o, 'value')) throw invalid(`${o.op} operation does not apply: doc is missing value`);
      return structuredClone(o.value);
    };
    const from = () => {
      if (typeof o.from !== 'string') throw invalid(`${o.op} operation does not apply: doc is missing from path`);
      return o.from;
    };
    switch (o.op) {
      case 'add':
        doc = add(doc, o.path, value());
        break;
      case 'remove':
        remove(doc, o.path);
        break;
      case 'replace':
        if (o.path === '') doc = value();
        else {
          remove(doc, o.path);
          doc = add(doc, o.path, value());
        }
        break;
      case 'move': {
        const moved = remove(doc, from());
        doc = add(doc, o.path, moved);
        break;
      }
      case 'copy':
        doc = add(doc, o.path, structuredClone(get(doc, from())));
        break;
      case 'test':
        if (JSON.stringify(get(doc, o.path)) !== JSON.stringify(value())) throw invalid(`testing value ${o.path} failed: test failed`);
        break;
      default:
        throw new ApiError(400, 'BadRequest', `Unexpected kind: ${String(o.op)}`);
    }
  }
  return doc;
}
