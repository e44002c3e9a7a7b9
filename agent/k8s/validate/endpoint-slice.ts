/** An EndpointSlice: ValidateEndpointSlice, for the fields kpr reads. */
import { parseIP } from '../../net/ip.js';
import { nonSpecialIP } from './addresses.js';
import { INT32_MAX, INT32_MIN, array, boolean, fail, integer, object, oneOf, show, string, type Obj } from './json-checks.js';
import { LIMITS } from './limits.js';
import { validateMeta } from './metadata.js';
import { dnsLabel, dnsSubdomain, fqdn, labelValue } from './names.js';
import { PROTOCOLS } from './service.js';

const ADDRESS_TYPES = ['IPv4', 'IPv6', 'FQDN'] as const;

export function validateSlice(o: Obj): void {
  validateMeta(o.metadata, true, dnsSubdomain);
  const addressType = oneOf(o.addressType, 'addressType', ADDRESS_TYPES);
  if (!addressType) fail('addressType', 'required');

  const endpoints = array(o.endpoints, 'endpoints', LIMITS.sliceEndpoints) ?? [];
  for (let i = 0; i < endpoints.length; i++) {
    const f = `endpoints[${i}]`;
    const e = object(endpoints[i], f, true)!;
    const addresses = array(e.addresses, `${f}.addresses`, LIMITS.endpointAddresses) ?? [];
    if (addresses.length === 0) fail(`${f}.addresses`, 'must contain at least 1 address');
    for (let j = 0; j < addresses.length; j++) {
      const af = `${f}.addresses[${j}]`;
      const s = string(addresses[j], af) ?? '';
      if (addressType === 'FQDN') {
        fqdn(s, af);
        continue;
      }
      const p = parseIP(s);
      if (!p || p.family !== addressType) fail(af, `must be a valid ${addressType} address, not ${show(s)}`);
      nonSpecialIP(p, s, af);
    }
    const c = object(e.conditions, `${f}.conditions`);
    if (c) {
      boolean(c.ready, `${f}.conditions.ready`);
      boolean(c.serving, `${f}.conditions.serving`);
      boolean(c.terminating, `${f}.conditions.terminating`);
    }
    const nodeName = string(e.nodeName, `${f}.nodeName`);
    if (nodeName !== undefined) dnsSubdomain(nodeName, `${f}.nodeName`);
    string(e.zone, `${f}.zone`);
    const hostname = string(e.hostname, `${f}.hostname`);
    if (hostname !== undefined) dnsLabel(hostname, `${f}.hostname`);
    const hints = object(e.hints, `${f}.hints`);
    if (hints) {
      hintNames(hints.forZones, `${f}.hints.forZones`, LIMITS.zoneHints, labelValue);
      hintNames(hints.forNodes, `${f}.hints.forNodes`, LIMITS.nodeHints, dnsSubdomain);
    }
  }

  const ports = array(o.ports, 'ports', LIMITS.slicePorts) ?? [];
  const names = new Set<string>();
  for (let i = 0; i < ports.length; i++) {
    const f = `ports[${i}]`;
    const p = object(ports[i], f, true)!;
    const name = string(p.name, `${f}.name`) ?? '';
    if (name !== '') dnsLabel(name, `${f}.name`);
    if (names.has(name)) fail(`${f}.name`, `duplicate name ${show(name)}`);
    names.add(name);
    // The API server checks only the type (int32); kube-proxy and the planner skip a port outside 1..65535 alone.
    integer(p.port, `${f}.port`, INT32_MIN, INT32_MAX);
    oneOf(p.protocol, `${f}.protocol`, PROTOCOLS);
    string(p.appProtocol, `${f}.appProtocol`);
  }
}

function hintNames(v: unknown, field: string, max: number, rule: (s: string, field: string) => void): void {
  const list = array(v, field, max) ?? [];
  const seen = new Set<string>();
  for (let i = 0; i < list.length; i++) {
    const h = object(list[i], `${field}[${i}]`, true)!;
    const f = `${field}[${i}].name`;
    const name = string(h.name, f) ?? '';
    rule(name, f);
    if (seen.has(name)) fail(f, `duplicate ${show(name)}`);
    seen.add(name);
  }
}
