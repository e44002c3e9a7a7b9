/**
 * kpr's addition to /healthz (pure, clock-free): whether every attachment kpr
 * owns is in place. The node datapath checks them against the kernel every
 * 2 s and at each periodic resync and attaches again what went missing
 * (agent/datapath/attachment-check.ts); an attachment it could not attach
 * again means traffic it carries is not translated on this node, so
 * /healthz answers 503 with the reason, as for stale caches. Before the
 * first check (the node datapath not up yet) nothing is said.
 */
import type { HealthResponse } from './proxy-health.js';

/** One attachment found missing that could not be attached again. */
export interface MissingAttachmentLike {
  hook: string;
  target: string;
  program: string;
  found: string;
  error: string;
}

/** The last attachment check (agent/datapath/node-datapath.ts AttachmentStatus fits). */
export interface AttachmentStateLike {
  checkedAt: Date;
  trigger: string;
  attached: Partial<Record<string, number>>;
  repaired: Partial<Record<string, number>>;
  missing: MissingAttachmentLike[];
}

/** /healthz "attachments". */
export interface AttachmentHealth {
  healthy: boolean;
  /** Why not, when not healthy. */
  reason?: string;
  /** Seconds since the last check. */
  checkedSecondsAgo: number;
  /** In place, by hook (cgroup, and tcx or tc). */
  attached: Partial<Record<string, number>>;
  /** Repaired since the agent started, by hook. */
  repaired: Partial<Record<string, number>>;
  missing: MissingAttachmentLike[];
}

/** `state` undefined: no check ran yet (nothing to say). */
export function attachmentHealth(state: AttachmentStateLike | undefined, now: Date): AttachmentHealth | undefined {
  if (!state) return undefined;
  const out: AttachmentHealth = {
    healthy: state.missing.length === 0,
    checkedSecondsAgo: Math.max(0, Math.round((now.getTime() - state.checkedAt.getTime()) / 100) / 10),
    attached: state.attached,
    repaired: state.repaired,
    missing: state.missing,
  };
  if (!out.healthy) {
    const first = state.missing[0];
    const more = state.missing.length > 1 ? ` (and ${state.missing.length - 1} more)` : '';
    out.reason = `${state.missing.length} attachment${state.missing.length > 1 ? 's' : ''} missing and not attached again: ${first.program} on ${first.hook} ${first.target}: ${first.found}; ${first.error}${more}`;
  }
  return out;
}

/** The /healthz answer with the attachment verdict: the field "attachments" added, 503 when one is missing. */
export function withAttachments(r: HealthResponse, a: AttachmentHealth | undefined): HealthResponse {
  if (!a) return r;
  return { statusCode: a.healthy ? r.statusCode : 503, body: { ...r.body, attachments: a } };
}
