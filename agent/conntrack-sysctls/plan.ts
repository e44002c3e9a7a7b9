/**
 * What kube-proxy did to the node's netfilter conntrack at start
 * (cmd/kube-proxy/app/server_linux.go, setupConntrack, and conntrack.go),
 * as a list of sysctl writes: pure, from the settings and the values read.
 *
 * - nf_conntrack_max = max(maxPerCore × CPUs, min) when maxPerCore > 0
 *   (0: left as is). Only raised, never lowered (kube-proxy stopped
 *   lowering it). It is one global value that only the initial network
 *   namespace may change: elsewhere the kernel shows it read-only.
 * - hashsize (/sys/module/nf_conntrack/parameters/hashsize), when
 *   nf_conntrack_max was raised and the table has fewer than max/4 buckets:
 *   max/4. The kernel takes it only from the initial network namespace.
 * - nf_conntrack_tcp_timeout_established, _close_wait,
 *   nf_conntrack_udp_timeout, _udp_timeout_stream: the value in seconds,
 *   when not 0 (0: left as is) and different.
 * - nf_conntrack_tcp_be_liberal: 1 when tcpBeLiberal is true (false: left as is).
 *
 * These are the kernel's netfilter conntrack, the one the CNI's and every
 * other iptables/nftables rule's traffic uses; kpr's own tc conntrack
 * (kpr_ct) does not read them.
 */
import type { ConntrackSysctlSettings, Sourced } from '../config/conntrack-sysctl-settings.js';

/** The files, by sysctl name (net.netfilter.*, as sysctl(8) names them). */
export const CONNTRACK_SYSCTLS = {
  max: 'net.netfilter.nf_conntrack_max',
  tcpEstablished: 'net.netfilter.nf_conntrack_tcp_timeout_established',
  tcpCloseWait: 'net.netfilter.nf_conntrack_tcp_timeout_close_wait',
  tcpBeLiberal: 'net.netfilter.nf_conntrack_tcp_be_liberal',
  udp: 'net.netfilter.nf_conntrack_udp_timeout',
  udpStream: 'net.netfilter.nf_conntrack_udp_timeout_stream',
} as const;
export const HASHSIZE = 'nf_conntrack.hashsize';

export type SysctlName = (typeof CONNTRACK_SYSCTLS)[keyof typeof CONNTRACK_SYSCTLS] | typeof HASHSIZE;

/** What was read on the node. A value is undefined when its file is missing (nf_conntrack not loaded). */
export interface ConntrackFacts {
  cpus: number;
  current: Partial<Record<SysctlName, number>>;
  /** Whether nf_conntrack_max's file is writable here (the kernel makes it read-only outside the initial network namespace). */
  maxWritable: boolean;
}

/** write: to be written; keep: already right; leave: the setting says leave it; skip: cannot be (missing, read-only here). */
export type SysctlAction = 'write' | 'keep' | 'leave' | 'skip';

export interface SysctlStep {
  name: SysctlName;
  current?: number;
  want?: number;
  action: SysctlAction;
  why: string;
  /** Only after a successful write of this step's name (hashsize after nf_conntrack_max). */
  after?: SysctlName;
}

const src = (s: Sourced<unknown>, field: string, unit = '') => `${field} ${String(s.value)}${unit} (${s.from})`;

/** A timeout in seconds: written when not 0 and different (kube-proxy's setIntSysCtl). */
function timeout(name: SysctlName, s: Sourced<number>, field: string, facts: ConntrackFacts): SysctlStep {
  const current = facts.current[name];
  const why = src(s, field, 's');
  if (s.value === 0) return { name, current, action: 'leave', why: `${why}: 0 leaves it as is` };
  if (current === undefined) return { name, want: s.value, action: 'skip', why: `no such sysctl (nf_conntrack not loaded); ${why}` };
  if (current === s.value) return { name, current, want: s.value, action: 'keep', why: `already so; ${why}` };
  return { name, current, want: s.value, action: 'write', why };
}

/** The steps, in kube-proxy's order: nf_conntrack_max (and hashsize), the TCP timeouts, be_liberal, the UDP timeouts. */
export function planConntrackSysctls(s: ConntrackSysctlSettings, facts: ConntrackFacts): SysctlStep[] {
  const steps: SysctlStep[] = [];
  const max = CONNTRACK_SYSCTLS.max;
  const current = facts.current[max];
  if (s.maxPerCore.value === 0) {
    steps.push({ name: max, current, action: 'leave', why: `${src(s.maxPerCore, 'maxPerCore')}: 0 leaves it (and min) as is` });
  } else {
    const scaled = s.maxPerCore.value * facts.cpus;
    const want = Math.max(scaled, s.min.value);
    const rule = `max(maxPerCore ${s.maxPerCore.value} (${s.maxPerCore.from}) x ${facts.cpus} CPUs, min ${s.min.value} (${s.min.from})) = ${want}`;
    if (current === undefined) steps.push({ name: max, want, action: 'skip', why: `no such sysctl (nf_conntrack not loaded); ${rule}` });
    else if (current >= want) steps.push({ name: max, current, want, action: 'keep', why: `${rule}; only raised, never lowered` });
    else if (!facts.maxWritable) {
      steps.push({ name: max, current, want, action: 'skip', why: `${rule}; read-only here: only the host's (initial) network namespace may change it` });
    } else {
      steps.push({ name: max, current, want, action: 'write', why: rule });
      const buckets = facts.current[HASHSIZE];
      const wantBuckets = Math.floor(want / 4);
      if (buckets !== undefined && buckets < wantBuckets) {
        steps.push({
          name: HASHSIZE,
          current: buckets,
          want: wantBuckets,
          action: 'write',
          why: `nf_conntrack_max raised to ${want}: a quarter of it in buckets`,
          after: max,
        });
      } else if (buckets !== undefined) {
        steps.push({ name: HASHSIZE, current: buckets, action: 'keep', why: `at least a quarter of nf_conntrack_max ${want}` });
      }
    }
  }
  steps.push(timeout(CONNTRACK_SYSCTLS.tcpEstablished, s.tcpEstablishedTimeoutS, 'tcpEstablishedTimeout', facts));
  steps.push(timeout(CONNTRACK_SYSCTLS.tcpCloseWait, s.tcpCloseWaitTimeoutS, 'tcpCloseWaitTimeout', facts));
  const liberal = CONNTRACK_SYSCTLS.tcpBeLiberal;
  const cur = facts.current[liberal];
  if (!s.tcpBeLiberal.value) steps.push({ name: liberal, current: cur, action: 'leave', why: `${src(s.tcpBeLiberal, 'tcpBeLiberal')}: false leaves it as is` });
  else if (cur === undefined)
    steps.push({ name: liberal, want: 1, action: 'skip', why: `no such sysctl (nf_conntrack not loaded); ${src(s.tcpBeLiberal, 'tcpBeLiberal')}` });
  else if (cur === 1) steps.push({ name: liberal, current: cur, want: 1, action: 'keep', why: `already so; ${src(s.tcpBeLiberal, 'tcpBeLiberal')}` });
  else steps.push({ name: liberal, current: cur, want: 1, action: 'write', why: src(s.tcpBeLiberal, 'tcpBeLiberal') });
  steps.push(timeout(CONNTRACK_SYSCTLS.udp, s.udpTimeoutS, 'udpTimeout', facts));
  steps.push(timeout(CONNTRACK_SYSCTLS.udpStream, s.udpStreamTimeoutS, 'udpStreamTimeout', facts));
  return steps;
}
