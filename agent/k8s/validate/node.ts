/** A Node, for what kpr reads: name, labels, deletionTimestamp, spec.taints, status.addresses. */
import { array, fail, object, oneOf, string, type Obj } from './json-checks.js';
import { validateMeta } from './metadata.js';
import { dnsSubdomain, labelValue, qualifiedName } from './names.js';

const TAINT_EFFECTS = ['NoSchedule', 'PreferNoSchedule', 'NoExecute'] as const;

export function validateNode(o: Obj): void {
  validateMeta(o.metadata, false, dnsSubdomain);
  const spec = object(o.spec, 'spec');
  (array(spec?.taints, 'spec.taints') ?? []).forEach((v, i) => {
    const f = `spec.taints[${i}]`;
    const t = object(v, f, true)!;
    const key = string(t.key, `${f}.key`) ?? '';
    qualifiedName(key, `${f}.key`);
    const value = string(t.value, `${f}.value`);
    if (value !== undefined) labelValue(value, `${f}.value`);
    if (!oneOf(t.effect, `${f}.effect`, TAINT_EFFECTS)) fail(`${f}.effect`, 'required');
  });
  const status = object(o.status, 'status');
  (array(status?.addresses, 'status.addresses') ?? []).forEach((v, i) => {
    const f = `status.addresses[${i}]`;
    const a = object(v, f, true)!;
    string(a.type, `${f}.type`);
    string(a.address, `${f}.address`);
  });
}
