/**
 * Who owns a frontend (address, port, protocol) that several Services claim,
 * and how the losers are reported. Pure apart from the logger it is given.
 *
 * Precedence (docs/architecture.md, "Address ownership"), by how the address
 * is claimed — the authority it takes to make the claim:
 *
 *   1. ClusterIP     spec.clusterIP(s): allocated by the API server, unique in the cluster;
 *   2. NodePort      a node address with spec.ports[].nodePort: allocated by the API server;
 *   3. LoadBalancer  status.loadBalancer.ingress: written by a load-balancer controller (services/status);
 *   4. ExternalIP    spec.externalIPs: anyone who may edit a Service (CVE-2020-8554).
 *
 * Between claims of the same class: the oldest Service (metadata.creationTimestamp,
 * set by the API server, so a new Service cannot take an address over by
 * claiming it), then the lowest "namespace/name". A claim whose age is
 * unknown counts as the youngest.
 *
 * Besides, a LoadBalancer or ExternalIP claim on an address that is any
 * Service's ClusterIP is refused whatever its port: the ClusterIP address
 * belongs to its Service, and a second Service answering on it (even on a
 * port the first does not use) is the hijack of CVE-2020-8554 in another form.
 */
import { FE_TYPE } from '../maps/layout.js';
import type { SkippedObject } from '../plan/types.js';
import type { OncePerVersion } from '../log/log-dedupe.js';

export type ClaimClass = 'ClusterIP' | 'NodePort' | 'LoadBalancer' | 'ExternalIP';

const CLASS_OF: readonly ClaimClass[] = ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalIP'];

/** The claim class of a frontend type (FE_TYPE); its index is the rank (0 wins). */
export function claimClass(feType: number): ClaimClass {
  return CLASS_OF[feType] ?? 'ExternalIP';
}

/** LoadBalancer and ExternalIP claims: asserted by a Service rather than allocated, and never allowed on a ClusterIP address. */
export function isAssertedClaim(feType: number): boolean {
  return feType === FE_TYPE.LOAD_BALANCER || feType === FE_TYPE.EXTERNAL_IP || !(feType in CLASS_OF);
}

export interface Claim {
  /** "namespace/name". */
  service: string;
  /** FE_TYPE of the claiming frontend. */
  feType: number;
  /** metadata.creationTimestamp in ms; Infinity when unknown. */
  created: number;
}

/** Whether claim `a` wins over claim `b`. */
export function outranks(a: Claim, b: Claim): boolean {
  const ra = a.feType in CLASS_OF ? a.feType : CLASS_OF.length;
  const rb = b.feType in CLASS_OF ? b.feType : CLASS_OF.length;
  if (ra !== rb) return ra < rb;
  if (a.created !== b.created) return a.created < b.created;
  return a.service < b.service;
}

/** Why a claim lost. */
export type ConflictRule = 'outranked' | 'cluster-ip-address';

/** One Service's claim on one frontend that is not programmed because another Service owns the address. */
export interface FrontendConflict {
  /** The losing Service. */
  service: string;
  /** Its claim class. */
  type: ClaimClass;
  rule: ConflictRule;
  /** The frontend, as the loser's plan named it ("addr:port/PROTO"). */
  frontend: string;
  /** The Service that owns it. */
  owner: string;
  /** The owner's claim class. */
  ownerType: ClaimClass;
}

/** kpr_frontend_conflicts: frontends not programmed, per losing claim class and rule. */
export interface ConflictCount {
  type: ClaimClass;
  rule: ConflictRule;
  frontends: number;
}

/** The skipped-list reason for a lost claim. */
export function conflictReason(c: FrontendConflict): string {
  if (c.rule === 'cluster-ip-address') {
    return `${c.type} frontend ${c.frontend} is not programmed: its address is the ClusterIP of Service ${c.owner}, which owns the address on every port`;
  }
  return `${c.type} frontend ${c.frontend} is also claimed by Service ${c.owner} as ${c.ownerType}, which wins (ClusterIP > NodePort > LoadBalancer > ExternalIP, then the oldest Service, then the lowest name)`;
}

export function conflictSkip(c: FrontendConflict): SkippedObject {
  return { object: `Service ${c.service}`, reason: conflictReason(c) };
}

/** Detail lines logged per sync at most; the rest of the new conflicts go into that sync's summary line only. */
export const CONFLICT_DETAIL_LINES = 10;
/** Conflicts named in a summary line. */
const SUMMARY_FIRST = 5;

export interface ConflictLogger {
  warn(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * Logs conflicts once per (loser, frontend) and owner: a conflict that
 * persists is not logged again by later syncs, one that goes away is
 * forgotten (and logged again if it comes back). A sync that finds more than
 * CONFLICT_DETAIL_LINES new ones logs that many in detail and one summary
 * line with the count and the first few.
 */
export class ConflictLog {
  private fresh: FrontendConflict[] = [];

  constructor(
    private readonly seen: OncePerVersion,
    private readonly log: ConflictLogger,
  ) {}

  /** The conflicts of frontend `fk` as now decided; `before` as last decided (forgotten when gone). */
  update(fk: string, now: readonly FrontendConflict[], before: readonly FrontendConflict[] | undefined): void {
    if (before) {
      for (const b of before) if (!now.some((c) => c.service === b.service)) this.seen.forget(`${b.service}|${fk}`);
    }
    for (const c of now) if (this.seen.isNew(`${c.service}|${fk}`, `${c.rule}|${c.owner}|${c.type}`)) this.fresh.push(c);
  }

  /** Writes this sync's lines (new conflicts only); `total` is the number of conflicts now in force. */
  flush(total: number): void {
    const fresh = this.fresh;
    if (fresh.length === 0) return;
    this.fresh = [];
    for (let i = 0; i < fresh.length && i < CONFLICT_DETAIL_LINES; i++) {
      const c = fresh[i];
      this.log.warn('frontend conflict', {
        service: c.service,
        frontend: c.frontend,
        type: c.type,
        rule: c.rule,
        owner: c.owner,
        ownerType: c.ownerType,
        reason: conflictReason(c),
      });
    }
    if (fresh.length > CONFLICT_DETAIL_LINES) {
      this.log.warn('frontend conflicts', {
        new: fresh.length,
        total,
        notLoggedOneByOne: fresh.length - CONFLICT_DETAIL_LINES,
        first: fresh
          .slice(CONFLICT_DETAIL_LINES, CONFLICT_DETAIL_LINES + SUMMARY_FIRST)
          .map((c) => `Service ${c.service} ${c.type} ${c.frontend} (owner ${c.owner})`),
      });
    }
  }
}
