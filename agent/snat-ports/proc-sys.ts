/**
 * kpr's SNAT port range and the node's ephemeral ports, through
 * /proc/sys/net/ipv4/ip_local_reserved_ports and ip_local_port_range. Both
 * are per network namespace, and the kernel resolves /proc/sys/net by the
 * namespace of the thread that opens the file: with `netns` (the agent's
 * --netns) every read and write happens inside it, never in the agent's own.
 * A read or write the kernel refuses is a result with the reason, never a
 * throw. No shelling out.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { withNetns } from '../../native/index.js';
import { SNAT_PORT_RANGE } from '../maps/layout.js';
import { formatPortList, parseLocalPortRange, parsePortList, planRelease, planReserve, type PortRange } from './port-list.js';

export const RESERVED_PORTS_FILE = '/proc/sys/net/ipv4/ip_local_reserved_ports';
export const LOCAL_PORT_RANGE_FILE = '/proc/sys/net/ipv4/ip_local_port_range';

/** kpr's SNAT range as a PortRange. */
export const SNAT_RANGE: PortRange = { lo: SNAT_PORT_RANGE.min, hi: SNAT_PORT_RANGE.max };

export interface SnatPortsOptions {
  /** The node's network namespace (a path); undefined: this process's own. */
  netns?: string;
}

const REASONS: Record<string, string> = {
  EACCES: 'permission denied',
  EPERM: "not permitted (needs root in the node's network namespace)",
  EROFS: "read-only file system (a container's /proc/sys is read-only unless it is privileged: see docs/install.md, *SNAT ports*)",
  ENOENT: 'no such file',
  EINVAL: 'the kernel refused the value',
};

function reason(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code ?? '';
  return REASONS[code] ? `${REASONS[code]} [${code}]` : (err as Error).message;
}

function inNode<T>(opts: SnatPortsOptions, fn: () => T): T {
  return opts.netns ? withNetns(opts.netns, fn) : fn();
}

export interface SnatPortFacts {
  /** The reserved ports, or why they could not be read. */
  reserved: PortRange[] | { error: string };
  /** The node's ephemeral ports, or why they could not be read. */
  localPortRange: PortRange | { error: string };
}

/** What the node has now. */
export function readSnatPortFacts(opts: SnatPortsOptions = {}): SnatPortFacts {
  return inNode(opts, () => {
    const read = <T>(file: string, parse: (t: string) => T): T | { error: string } => {
      try {
        return parse(readFileSync(file, 'utf8'));
      } catch (err) {
        return { error: `${file}: ${reason(err)}` };
      }
    };
    return { reserved: read(RESERVED_PORTS_FILE, parsePortList), localPortRange: read(LOCAL_PORT_RANGE_FILE, parseLocalPortRange) };
  });
}

function writeReserved(text: string): string | undefined {
  try {
    // The kernel takes "" as "none"; a newline ends the value either way.
    writeFileSync(RESERVED_PORTS_FILE, `${text}\n`, { flag: 'r+' });
    return undefined;
  } catch (err) {
    return `${RESERVED_PORTS_FILE}: ${reason(err)}`;
  }
}

export interface ReserveResult {
  /** written: kpr added its range; kept: it was reserved already; failed: see error. */
  outcome: 'written' | 'kept' | 'failed';
  /** Whether kpr owns the reservation now (kpr_config's SNAT_PORTS_RESERVED flag; `kpr cleanup` releases it). */
  owned: boolean;
  before?: string;
  after?: string;
  error?: string;
}

/**
 * Adds kpr's SNAT range to the node's reserved ports, keeping every port
 * reserved before. `ownedBefore`: an earlier agent had added it (the
 * kpr_config flag), so a range found reserved is still kpr's.
 */
export function reserveSnatPorts(opts: SnatPortsOptions & { ownedBefore: boolean }): ReserveResult {
  return inNode(opts, () => {
    const facts = readSnatPortFacts();
    if ('error' in facts.reserved) return { outcome: 'failed', owned: opts.ownedBefore, error: facts.reserved.error };
    const before = formatPortList(facts.reserved);
    const plan = planReserve(facts.reserved, SNAT_RANGE, opts.ownedBefore);
    if (plan.action === 'keep') return { outcome: 'kept', owned: plan.owned, before, after: before };
    const error = writeReserved(plan.text!);
    if (error) return { outcome: 'failed', owned: opts.ownedBefore, before, error };
    return { outcome: 'written', owned: true, before, after: plan.text };
  });
}

export interface ReleasePlan {
  /** The list to write, or undefined when there is nothing to release. */
  text?: string;
  before?: string;
  error?: string;
}

/** `kpr cleanup`'s plan: kpr's range out of the reserved ports, if kpr owns it. */
export function planSnatPortsRelease(opts: SnatPortsOptions & { owned: boolean }): ReleasePlan {
  const facts = readSnatPortFacts(opts);
  if ('error' in facts.reserved) return { error: facts.reserved.error };
  return { text: planRelease(facts.reserved, SNAT_RANGE, opts.owned), before: formatPortList(facts.reserved) };
}

/** Writes a release plan's list; the error text when the kernel refused it. */
export function applySnatPortsRelease(text: string, opts: SnatPortsOptions = {}): string | undefined {
  return inNode(opts, () => writeReserved(text));
}
