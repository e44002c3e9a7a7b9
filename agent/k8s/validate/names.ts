/**
 * Name formats as k8s.io/apimachinery/pkg/util/validation checks them: DNS
 * labels and subdomains, qualified names (label and annotation keys), label
 * values and IANA service names (named ports).
 */
import { fail, show } from './json-checks.js';

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
/** IANA_SVC_NAME: a named port (targetPort). */
const PORT_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;

export function dnsLabel(s: string, field: string): void {
  if (s.length > 63 || !DNS1123_LABEL.test(s))
    fail(field, `must be a DNS-1123 label (at most 63 of a-z, 0-9, "-", starting and ending alphanumeric), not ${show(s)}`);
}

export function dns1035Label(s: string, field: string): void {
  if (s.length > 63 || !DNS1035_LABEL.test(s)) fail(field, `must be a DNS-1035 label (at most 63 of a-z, 0-9, "-", starting with a letter), not ${show(s)}`);
}

export function dnsSubdomain(s: string, field: string): void {
  if (s.length > 253 || !DNS1123_SUBDOMAIN.test(s)) fail(field, `must be a DNS-1123 subdomain (at most 253 of a-z, 0-9, "-", "."), not ${show(s)}`);
}

export function fqdn(s: string, field: string): void {
  const t = s.endsWith('.') ? s.slice(0, -1) : s;
  if (t.length > 253 || !DNS1123_SUBDOMAIN.test(t) || !t.includes('.')) fail(field, `must be a fully qualified domain name, not ${show(s)}`);
}

export function qualifiedName(s: string, field: string): void {
  const slash = s.indexOf('/');
  const name = slash < 0 ? s : s.slice(slash + 1);
  if (slash >= 0) {
    const prefix = s.slice(0, slash);
    if (prefix.length === 0 || prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix)) fail(field, `must have a DNS-1123 subdomain as prefix, not ${show(s)}`);
  }
  if (name.length === 0 || name.length > 63 || !QUALIFIED_NAME_PART.test(name))
    fail(field, `must be a qualified name (at most 63 of A-Z, a-z, 0-9, "-", "_", "."), not ${show(s)}`);
}

export function labelValue(s: string, field: string): void {
  if (s.length > 63 || !LABEL_VALUE.test(s)) fail(field, `must be a label value (at most 63 of A-Z, a-z, 0-9, "-", "_", "."), not ${show(s)}`);
}

export function portName(s: string, field: string): void {
  if (s.length > 15 || !PORT_NAME.test(s) || s.includes('--') || !/[a-z]/.test(s))
    fail(field, `must be an IANA service name (at most 15 of a-z, 0-9, "-", with a letter), not ${show(s)}`);
}
