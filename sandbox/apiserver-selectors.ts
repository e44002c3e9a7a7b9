/**
 * Label and field selectors with the Kubernetes query-string syntax, as the
 * sandbox API server evaluates them (apimachinery's labels.Parse / fields.Parse,
 * minus the set-based operators on fields, which the real server rejects too).
 */

export type KubeObject = Record<string, any> & {
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string>; [k: string]: any };
};

type LabelReq =
  { op: 'eq' | 'neq'; key: string; value: string } | { op: 'exists' | 'notexists'; key: string } | { op: 'in' | 'notin'; key: string; values: string[] };

type FieldReq = { op: 'eq' | 'neq'; path: string; value: string };

export class SelectorError extends Error {}

/** Splits on commas that are not inside parentheses ("a in (x,y),b"). */
function splitTerms(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of s) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      out.push(cur);
      cur = '';
    } else cur += ch;
  }
  out.push(cur);
  return out.map((t) => t.trim()).filter((t) => t.length > 0);
}

export function parseLabelSelector(s: string | undefined | null): LabelReq[] {
  if (!s) return [];
  return splitTerms(s).map((t): LabelReq => {
    let m = /^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(t);
    if (m) return { op: m[2] as 'in' | 'notin', key: m[1], values: m[3].split(',').map((v) => v.trim()) };
    m = /^([^\s!=]+)\s*!=\s*(\S*)$/.exec(t);
    if (m) return { op: 'neq', key: m[1], value: m[2] };
    m = /^([^\s!=]+)\s*==?\s*(\S*)$/.exec(t);
    if (m) return { op: 'eq', key: m[1], value: m[2] };
    m = /^!\s*([^\s!=]+)$/.exec(t);
    if (m) return { op: 'notexists', key: m[1] };
    m = /^([^\s!=()]+)$/.exec(t);
    if (m) return { op: 'exists', key: m[1] };
    throw new SelectorError(`unable to parse requirement: ${JSON.stringify(t)}`);
  });
}

export function parseFieldSelector(s: string | undefined | null): FieldReq[] {
  if (!s) return [];
  return splitTerms(s).map((t): FieldReq => {
    let m = /^([^\s!=]+)\s*!=\s*(.*)$/.exec(t);
    if (m) return { op: 'neq', path: m[1], value: m[2].trim() };
    m = /^([^\s!=]+)\s*==?\s*(.*)$/.exec(t);
    if (m) return { op: 'eq', path: m[1], value: m[2].trim() };
    throw new SelectorError(`invalid selector: '${t}'; can't understand '${t}'`);
  });
}

export function labelsMatch(reqs: LabelReq[], obj: KubeObject): boolean {
  const labels: Record<string, string> = obj.metadata?.labels ?? {};
  for (const r of reqs) {
    const has = Object.prototype.hasOwnProperty.call(labels, r.key);
    const v = labels[r.key];
    switch (r.op) {
      case 'eq':
        if (!has || v !== r.value) return false;
        break;
      case 'neq':
        if (has && v === r.value) return false;
        break;
      case 'exists':
        if (!has) return false;
        break;
      case 'notexists':
        if (has) return false;
        break;
      case 'in':
        if (!has || !r.values.includes(v)) return false;
        break;
      case 'notin':
        if (has && r.values.includes(v)) return false;
        break;
    }
  }
  return true;
}

/** The value of a dotted field path as a string ("" when absent), like the apiserver's field sets. */
function fieldValue(obj: KubeObject, path: string): string {
  let cur: any = obj;
  for (const part of path.split('.')) {
    if (cur === null || typeof cur !== 'object') return '';
    cur = cur[part];
  }
  if (cur === undefined || cur === null) return '';
  return typeof cur === 'object' ? JSON.stringify(cur) : String(cur);
}

export function fieldsMatch(reqs: FieldReq[], obj: KubeObject): boolean {
  for (const r of reqs) {
    const v = fieldValue(obj, r.path);
    if (r.op === 'eq' ? v !== r.value : v === r.value) return false;
  }
  return true;
}

export interface Selector {
  labels: LabelReq[];
  fields: FieldReq[];
  namespace?: string;
}

export function selectorMatches(sel: Selector, obj: KubeObject | undefined): boolean {
  if (!obj) return false;
  if (sel.namespace !== undefined && (obj.metadata?.namespace ?? '') !== sel.namespace) return false;
  return labelsMatch(sel.labels, obj) && fieldsMatch(sel.fields, obj);
}
