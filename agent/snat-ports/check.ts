/**
 * `kpr preflight`'s snat-ports row, from what the node has (pure): kpr's SNAT
 * range must not be ports the node autobinds. Advisory: with the range in
 * the ephemeral ports and not reserved, a node connection made after a
 * SNATed flow took its port can collide with that flow (docs/semantics.md,
 * rule 37).
 */
import { covers, formatPortList, overlap, type PortRange } from './port-list.js';
import type { SnatPortFacts } from './proc-sys.js';

export interface SnatPortsCheck {
  name: 'snat-ports';
  severity: 'advisory';
  ok: boolean;
  detail: string;
  fix?: string;
}

export function snatPortsCheck(facts: SnatPortFacts, range: PortRange): SnatPortsCheck {
  const name = 'snat-ports';
  const r = formatPortList([range]);
  const fix = `reserve it: sysctl -w net.ipv4.ip_local_reserved_ports=<the current list>,${r} (the agent does this at start when it may write /proc/sys: see docs/install.md, *SNAT ports*), or keep net.ipv4.ip_local_port_range below ${range.lo}`;
  if ('error' in facts.localPortRange)
    return { name, severity: 'advisory', ok: false, detail: `cannot read the ephemeral port range: ${facts.localPortRange.error}`, fix };
  const eph = facts.localPortRange;
  const ephText = `${eph.lo}-${eph.hi}`;
  if ('error' in facts.reserved) return { name, severity: 'advisory', ok: false, detail: `cannot read the reserved ports: ${facts.reserved.error}`, fix };
  if (covers(facts.reserved, range))
    return {
      name,
      severity: 'advisory',
      ok: true,
      detail: `kpr's SNAT ports ${r} are reserved (ip_local_reserved_ports ${formatPortList(facts.reserved)}); ephemeral ports ${ephText}`,
    };
  const clash = overlap(eph, range);
  if (!clash)
    return {
      name,
      severity: 'advisory',
      ok: true,
      detail: `kpr's SNAT ports ${r} are outside the ephemeral ports ${ephText} (not reserved: the agent reserves them at start)`,
    };
  return {
    name,
    severity: 'advisory',
    ok: false,
    detail: `the ephemeral ports ${ephText} include ${formatPortList([clash])} of kpr's SNAT ports ${r}, which are not reserved: a node connection may take a port a SNATed flow holds and time out`,
    fix,
  };
}
