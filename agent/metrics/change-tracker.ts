/**
 * What kube-proxy's change trackers feed its metrics, kept pure: changes
 * queued since the last applied sync (the *_changes_pending gauges) and the
 * EndpointSlices' last-change-trigger-time annotations, turned into network
 * programming latencies when a sync has written them to the maps.
 */
import { ANNOTATION_LAST_CHANGE_TRIGGER_TIME } from '../k8s/labels.js';

export interface TrackedChange {
  kind: 'Service' | 'EndpointSlice' | 'Node';
  /** The Service the change concerns ("ns/name"). */
  key: string;
  /** The slice's annotations (its last state for a delete), for EndpointSlice changes. */
  annotations?: Record<string, string> | undefined;
}

export class ChangeTracker {
  private endpointPending = 0;
  private readonly servicesPending = new Set<string>();
  /** Service → trigger times of the slice changes queued for it. */
  private readonly triggerTimes = new Map<string, Date[]>();

  /**
   * @param startedAt trigger times before it are ignored (kube-proxy's
   *   trackerStartTime): they describe changes made before this agent ran, and
   *   would report the agent's downtime as programming latency.
   */
  constructor(private readonly startedAt: Date) {}

  get endpointChangesPending(): number {
    return this.endpointPending;
  }

  get serviceChangesPending(): number {
    return this.servicesPending.size;
  }

  record(change: TrackedChange): void {
    if (change.kind === 'Service') {
      this.servicesPending.add(change.key);
    } else if (change.kind === 'EndpointSlice') {
      this.endpointPending++;
      const t = parseTriggerTime(change.annotations?.[ANNOTATION_LAST_CHANGE_TRIGGER_TIME]);
      if (t && t >= this.startedAt) {
        const list = this.triggerTimes.get(change.key);
        if (list) list.push(t);
        else this.triggerTimes.set(change.key, [t]);
      }
    }
  }

  /**
   * A sync covering every queued change has written the maps at `now`:
   * returns the network programming latency (seconds) of each recorded
   * trigger time, and clears what was pending.
   */
  applied(now: Date): number[] {
    const latencies: number[] = [];
    for (const times of this.triggerTimes.values()) for (const t of times) latencies.push(Math.max(0, (now.getTime() - t.getTime()) / 1000));
    this.triggerTimes.clear();
    this.servicesPending.clear();
    this.endpointPending = 0;
    return latencies;
  }
}

/** RFC 3339 (the controller writes RFC3339Nano); undefined when absent or unparsable. */
export function parseTriggerTime(text: string | undefined): Date | undefined {
  if (!text) return undefined;
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? undefined : new Date(ms);
}
