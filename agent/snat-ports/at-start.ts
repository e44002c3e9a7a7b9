/**
 * The agent's start: kpr's SNAT range reserved from the node's ephemeral
 * ports (docs/semantics.md, rule 37), with one log line saying what was done.
 * A node where it cannot be written (a container whose /proc/sys is
 * read-only) is a warning, not a failure: the datapath still skips ports
 * the node's sockets hold when it picks one, and with Linux's default
 * ip_local_port_range (32768-60999) the node never autobinds in kpr's range.
 */
import type { Logger } from '../log/log.js';
import { readSnatPortFacts, reserveSnatPorts, SNAT_RANGE, type SnatPortsOptions } from './proc-sys.js';
import { formatPortList, overlap } from './port-list.js';

/** Reserves the range; returns whether kpr owns the reservation (kpr_config's SNAT_PORTS_RESERVED). */
export function reserveSnatPortsAtStart(opts: SnatPortsOptions & { ownedBefore: boolean; log: Logger }): boolean {
  const r = reserveSnatPorts(opts);
  const range = formatPortList([SNAT_RANGE]);
  if (r.outcome !== 'failed') {
    opts.log.info('SNAT port range reserved', { range, outcome: r.outcome, owned: r.owned, reservedBefore: r.before, reservedNow: r.after });
    return r.owned;
  }
  const facts = readSnatPortFacts(opts);
  const ephemeral = 'error' in facts.localPortRange ? undefined : facts.localPortRange;
  const clash = ephemeral ? overlap(ephemeral, SNAT_RANGE) : undefined;
  opts.log.warn("cannot reserve the SNAT port range from the node's ephemeral ports (net.ipv4.ip_local_reserved_ports)", {
    range,
    error: r.error,
    ipLocalPortRange: ephemeral ? formatPortList([ephemeral]) : null,
    consequence: clash
      ? `the node may autobind ports ${formatPortList([clash])} that kpr SNATs to: a node connection made after a SNATed flow took its port can collide with it (see kpr preflight, snat-ports)`
      : 'none while ip_local_port_range stays clear of the range',
  });
  return r.owned;
}
