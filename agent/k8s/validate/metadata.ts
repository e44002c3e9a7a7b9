/** ObjectMeta of every watched kind: name (by the kind's name rule), namespace, labels, annotations. */
import { fail, object, show, string, stringMap, type Obj } from './json-checks.js';
import { LIMITS } from './limits.js';
import { dnsLabel, labelValue, qualifiedName } from './names.js';

export function validateMeta(raw: unknown, namespaced: boolean, name: (s: string, field: string) => void): Obj {
  const md = object(raw, 'metadata', true)!;
  const n = string(md.name, 'metadata.name');
  if (!n) fail('metadata.name', 'required');
  name(n, 'metadata.name');
  const ns = string(md.namespace, 'metadata.namespace');
  if (namespaced) {
    if (!ns) fail('metadata.namespace', 'required');
    dnsLabel(ns, 'metadata.namespace');
  } else if (ns) {
    fail('metadata.namespace', `not allowed on this kind, not ${show(ns)}`);
  }
  string(md.resourceVersion, 'metadata.resourceVersion');
  string(md.deletionTimestamp, 'metadata.deletionTimestamp');
  const labels = stringMap(md.labels, 'metadata.labels');
  if (labels) {
    for (const k in labels) {
      qualifiedName(k, `metadata.labels[${k}]`);
      labelValue(labels[k] as string, `metadata.labels[${k}]`);
    }
  }
  const annotations = stringMap(md.annotations, 'metadata.annotations');
  if (annotations) {
    let bytes = 0;
    for (const k in annotations) {
      qualifiedName(k.toLowerCase(), `metadata.annotations[${k}]`);
      bytes += Buffer.byteLength(k) + Buffer.byteLength(annotations[k] as string);
    }
    if (bytes > LIMITS.annotationBytes) fail('metadata.annotations', `must have at most ${LIMITS.annotationBytes} bytes, not ${bytes}`);
  }
  return md;
}
