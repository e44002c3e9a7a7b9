/**
 * The desired state's claims: each Service's desired frontends, which
 * Service(s) claim each frontend (address, port, protocol), the ClusterIP
 * addresses and LoadBalancer/ExternalIP claims per address, and which claim
 * wins a contested frontend (ownership.ts's precedence), with the claims
 * that lost (kpr_frontend_conflicts, logged once).
 */
import { FE_TYPE } from '../maps/layout.js';
import type { PlanFrontend, SkippedObject } from '../plan/types.js';
import { OncePerVersion } from '../log/log-dedupe.js';
import { desiredFrontendLabel, sameTuples, toDesiredFrontend, type BackendTuple, type DesiredFrontend } from './desired-frontend.js';
import {
  ConflictLog,
  claimClass,
  conflictSkip,
  isAssertedClaim,
  outranks,
  type Claim,
  type ConflictCount,
  type ConflictLogger,
  type FrontendConflict,
} from './ownership.js';
import type { PlanSource } from './sync-types.js';

export class Claims {
  /** Service → its valid desired frontends (unique frontend ids). */
  readonly desired = new Map<string, DesiredFrontend[]>();
  /** frontend key → the Service(s) that want it (winner() decides between them); an array only on conflict. */
  readonly claimants = new Map<string, string | string[]>();
  /**
   * ClusterIP addresses of the desired frontends: address → the Service
   * with ClusterIP frontends there, a Set only when several (broken input):
   * a Map per address was two objects per Service kept for good.
   */
  readonly clusterAddrs = new Map<string, string | Set<string>>();
  /** LoadBalancer and ExternalIP frontends claimed, per address (re-decided when the address becomes or stops being a ClusterIP). */
  readonly assertedByAddr = new Map<string, Set<string>>();
  /** frontend key → the claims on it that lost, as last decided. */
  readonly conflicts = new Map<string, FrontendConflict[]>();
  readonly conflictLog: ConflictLog;
  /** Where this sync() reads creationTimestamps (its plans), and what it read, on conflicts only. */
  ages: PlanSource | undefined;
  readonly createdCache = new Map<string, number>();
  /** Whether `desired` is complete (a full sync has happened). */
  haveFullDesired = false;
  /** Adopted frontends no Service has claimed yet: only a full sync may remove them. */
  readonly adoptedUnclaimed = new Set<string>();

  constructor(logger: ConflictLogger) {
    this.conflictLog = new ConflictLog(new OncePerVersion(), logger);
  }

  /** Forgets every Service's desired frontends (a full sync sets them all again; adopt() starts from none). */
  clear(): void {
    this.desired.clear();
    this.claimants.clear();
    this.clusterAddrs.clear();
    this.assertedByAddr.clear();
  }

  /**
   * Replaces one Service's desired frontends; adds every frontend it had to
   * `affected` (the caller accounts for the ones it has, which it returns).
   * A re-plan equal to what the Service had keeps the objects it had and
   * its claims as they are: a periodic resync re-plans every Service, and
   * the new objects then die young instead of the old ones, long promoted,
   * becoming old-space garbage (and the claims' maps are not rebuilt).
   */
  set(service: string, frontends: PlanFrontend[], affected: Set<string>, skipped: SkippedObject[]): readonly DesiredFrontend[] {
    const old = this.desired.get(service);
    const mine = desiredOf(service, frontends, skipped);
    if (old !== undefined) {
      const same = sameList(old, mine);
      for (let i = 0; i < old.length; i++) {
        const d = old[i];
        affected.add(d.fk);
        if (same) continue; // the same claims as before: nothing to re-index (unclaiming and claiming again would churn the indexes' maps)
        this.unclaim(d.fk, service);
        this.unindexAddress(d, service, affected);
      }
      if (same) return old;
      this.desired.delete(service);
    }
    const n = mine.length;
    if (n === 0) return mine;
    for (let i = 0; i < n; i++) {
      const d = mine[i];
      this.claim(d.fk, service);
      this.indexAddress(d, service, affected);
    }
    const kept = n === 1 ? [mine[0]] : mine.slice(); // exact length: kept for long
    this.desired.set(service, kept);
    return kept;
  }

  /** The frontends of `mine` (a Service's) that it wins against other claimants. */
  winning(service: string, mine: readonly DesiredFrontend[]): readonly DesiredFrontend[] {
    let out: DesiredFrontend[] | null = null;
    for (let i = 0; i < mine.length; i++) {
      const c = this.claimants.get(mine[i].fk);
      const wins = c === service || (Array.isArray(c) && c.reduce((a, b) => (b < a ? b : a)) === service);
      if (!wins && out === null) out = mine.slice(0, i);
      else if (wins && out !== null) out.push(mine[i]);
    }
    return out ?? mine;
  }

  private claim(fk: string, service: string): void {
    const c = this.claimants.get(fk);
    if (c === undefined) this.claimants.set(fk, service);
    else if (typeof c === 'string') this.claimants.set(fk, [c, service]);
    else c.push(service);
  }

  private unclaim(fk: string, service: string): void {
    const c = this.claimants.get(fk);
    if (c === service) this.claimants.delete(fk);
    else if (Array.isArray(c)) {
      const rest = c.filter((s) => s !== service);
      this.claimants.set(fk, rest.length === 1 ? rest[0] : rest);
    }
  }

  /** Records a claimed ClusterIP address or LoadBalancer/ExternalIP frontend (after claim()). */
  private indexAddress(d: DesiredFrontend, service: string, affected: Set<string>): void {
    const addr = d.base.addr;
    if (d.feType === FE_TYPE.CLUSTER_IP) {
      const owners = this.clusterAddrs.get(addr);
      if (owners === undefined) {
        this.clusterAddrs.set(addr, service);
        this.assertedAt(addr, affected); // they may no longer use the address
      } else if (typeof owners !== 'string') owners.add(service);
      else if (owners !== service) this.clusterAddrs.set(addr, new Set([owners, service]));
    } else if (isAssertedClaim(d.feType)) {
      let fks = this.assertedByAddr.get(addr);
      if (!fks) this.assertedByAddr.set(addr, (fks = new Set()));
      fks.add(d.fk);
    }
  }

  /**
   * Undoes indexAddress (after unclaim()). set() unindexes all of a
   * Service's frontends at once, so its first ClusterIP frontend at an
   * address takes the Service off it; the others find it gone.
   */
  private unindexAddress(d: DesiredFrontend, service: string, affected: Set<string>): void {
    const addr = d.base.addr;
    if (d.feType === FE_TYPE.CLUSTER_IP) {
      const owners = this.clusterAddrs.get(addr);
      if (owners === undefined) return;
      if (typeof owners === 'string') {
        if (owners !== service) return;
      } else if (!owners.delete(service) || owners.size > 0) return;
      this.clusterAddrs.delete(addr);
      this.assertedAt(addr, affected); // the address is free for them again
    } else if (isAssertedClaim(d.feType) && !this.claimants.has(d.fk)) {
      const fks = this.assertedByAddr.get(addr);
      fks?.delete(d.fk);
      if (fks?.size === 0) this.assertedByAddr.delete(addr);
    }
  }

  /** Marks the LoadBalancer/ExternalIP frontends on `addr` for re-decision. */
  private assertedAt(addr: string, affected: Set<string>): void {
    const fks = this.assertedByAddr.get(addr);
    if (fks) for (const fk of fks) affected.add(fk);
  }

  desiredOf(service: string, fk: string): DesiredFrontend {
    const list = this.desired.get(service)!;
    return list.length === 1 ? list[0] : list.find((d) => d.fk === fk)!;
  }

  private createdOf(service: string): number {
    let t = this.createdCache.get(service);
    if (t === undefined) {
      const c = this.ages?.created?.(service);
      t = typeof c === 'number' && Number.isFinite(c) ? c : Infinity;
      this.createdCache.set(service, t);
    }
    return t;
  }

  /**
   * The desired frontend for a frontend id: the claim that wins by
   * ownership.ts's precedence (ClusterIP > NodePort > LoadBalancer >
   * ExternalIP, then the oldest, then the lowest key). LoadBalancer and
   * ExternalIP claims on any Service's ClusterIP address are refused. Every
   * losing claim goes to `skipped`, kpr_frontend_conflicts and (once) the log.
   */
  winner(fk: string, skipped: SkippedObject[]): DesiredFrontend | undefined {
    const c = this.claimants.get(fk);
    const before = this.conflicts.get(fk);
    if (c === undefined) {
      if (before) this.setConflicts(fk, [], before);
      return undefined;
    }
    if (typeof c === 'string') {
      const d = this.desiredOf(c, fk);
      if (before === undefined && (!isAssertedClaim(d.feType) || this.clusterAddrs.size === 0 || !this.clusterAddrs.has(d.base.addr))) return d; // the common case
    }
    const services = typeof c === 'string' ? [c] : [...c].sort();
    let best: { d: DesiredFrontend; claim: Claim } | undefined;
    const lost: FrontendConflict[] = [];
    const contenders: Array<{ d: DesiredFrontend; claim: Claim }> = [];
    for (const s of services) {
      const d = this.desiredOf(s, fk);
      const owner = isAssertedClaim(d.feType) ? this.clusterIPOwner(d.base.addr, s) : undefined;
      if (owner !== undefined) {
        lost.push({ service: s, type: claimClass(d.feType), rule: 'cluster-ip-address', frontend: desiredFrontendLabel(d), owner, ownerType: 'ClusterIP' });
        continue;
      }
      const claim: Claim = { service: s, feType: d.feType, created: services.length > 1 ? this.createdOf(s) : Infinity };
      const x = { d, claim };
      contenders.push(x);
      if (!best || outranks(claim, best.claim)) best = x;
    }
    for (const x of contenders) {
      if (x === best) continue;
      lost.push({
        service: x.claim.service,
        type: claimClass(x.d.feType),
        rule: 'outranked',
        frontend: desiredFrontendLabel(x.d),
        owner: best!.claim.service,
        ownerType: claimClass(best!.d.feType),
      });
    }
    this.setConflicts(fk, lost, before);
    for (const l of lost) skipped.push(conflictSkip(l));
    return best?.d;
  }

  /** The Service (lowest key) whose ClusterIP is `addr`, other than `service`; undefined when none. */
  private clusterIPOwner(addr: string, service: string): string | undefined {
    const owners = this.clusterAddrs.get(addr);
    if (owners === undefined) return undefined;
    if (typeof owners === 'string') return owners !== service ? owners : undefined;
    let first: string | undefined;
    for (const s of owners) if (s !== service && (first === undefined || s < first)) first = s;
    return first;
  }

  setConflicts(fk: string, now: FrontendConflict[], before = this.conflicts.get(fk)): void {
    if (now.length > 0) this.conflicts.set(fk, now);
    else this.conflicts.delete(fk);
    if (now.length > 0 || before) this.conflictLog.update(fk, now, before);
  }

  /** kpr_frontend_conflicts' values: lost claims now in force, by class and rule. */
  conflictCounts(): ConflictCount[] {
    const counts = new Map<string, ConflictCount>();
    for (const list of this.conflicts.values()) {
      for (const c of list) {
        const k = `${c.type}|${c.rule}`;
        const n = counts.get(k);
        if (n) n.frontends++;
        else counts.set(k, { type: c.type, rule: c.rule, frontends: 1 });
      }
    }
    return [...counts.values()];
  }

  /** Logs the conflicts changed since the last flush, with the total now in force. */
  flushLog(total: number): void {
    this.conflictLog.flush(total);
  }
}

/** A Service's valid desired frontends, in plan order, each frontend once (a repeat is reported in `skipped`). */
function desiredOf(service: string, frontends: readonly PlanFrontend[], skipped: SkippedObject[]): DesiredFrontend[] {
  const mine: DesiredFrontend[] = [];
  let ids: Set<string> | null = null;
  for (let i = 0; i < frontends.length; i++) {
    const d = toDesiredFrontend(service, frontends[i], skipped);
    if (!d) continue;
    if (mine.length > 0) {
      ids ??= new Set(mine.map((x) => x.fk));
      if (ids.has(d.fk)) {
        skipped.push({ object: `Service ${service}`, reason: `frontend ${desiredFrontendLabel(d)} is listed twice; the first is used` });
        continue;
      }
      ids.add(d.fk);
    }
    mine.push(d);
  }
  return mine;
}

function sameList(a: readonly DesiredFrontend[], b: readonly DesiredFrontend[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!sameDesired(a[i], b[i])) return false;
  return true;
}

/** Whether two desired frontends hold the same values (every field the diff, the claims and the limits read). */
function sameDesired(a: DesiredFrontend, b: DesiredFrontend): boolean {
  return (
    a.fk === b.fk &&
    a.service === b.service &&
    a.portName === b.portName &&
    a.feType === b.feType &&
    a.planAddress === b.planAddress &&
    a.base.addr === b.base.addr &&
    a.base.port === b.base.port &&
    a.base.proto === b.base.proto &&
    a.flags === b.flags &&
    a.affinityTimeout === b.affinityTimeout &&
    a.clusterIP === b.clusterIP &&
    a.truncatedFrom === b.truncatedFrom &&
    sameStrings(a.sourceRanges, b.sourceRanges) &&
    sameBackends(a.tuples, a.locals, b.tuples, b.locals) &&
    (a.internalTuples === null
      ? b.internalTuples === null
      : b.internalTuples !== null && sameBackends(a.internalTuples, a.internalLocals, b.internalTuples, b.internalLocals))
  );
}

function sameStrings(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Same backends (tuples name address, port and protocol; an IPv6 address's text follows from its tuple) on this node or not alike. */
function sameBackends(at: readonly BackendTuple[], al: readonly number[], bt: readonly BackendTuple[], bl: readonly number[]): boolean {
  return sameTuples(at, bt) && al.length === bl.length && al.every((x, i) => x === bl[i]);
}
