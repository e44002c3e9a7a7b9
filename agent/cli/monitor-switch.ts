/**
 * kpr monitor's switch: the pinned one-entry array kpr_monitor holds the
 * deadline until which the programs record events (bpf_ktime_get_ns, i.e.
 * CLOCK_MONOTONIC, which process.hrtime.bigint() reads too). A reader keeps
 * it a lease ahead and renews it while it runs, so a reader that dies (kill
 * -9, OOM) leaves the datapath paying for nothing once its lease lapses.
 * Shared by `kpr monitor` and the benchmark's on/off arm.
 */
import type { BpfMap } from '../../native/index.js';
import { decodeMonitor, encodeMonitor, mapCodecs } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';

/** How far ahead a reader sets the deadline. */
export const MONITOR_LEASE_NS = 5_000_000_000n;
/** How often a running reader renews it (well inside the lease, whatever the load). */
export const MONITOR_RENEW_MS = 1000;

const KEY = mapCodecs(MAPS.monitor).key.encode(0);

export class MonitorSwitch {
  /** The deadline this switch wrote last (0n: none, or released). */
  private written = 0n;

  constructor(
    private readonly map: BpfMap,
    private readonly now: () => bigint = () => process.hrtime.bigint(),
  ) {}

  /** The deadline in the map now (0n: off). */
  deadline(): bigint {
    const v = this.map.lookup(KEY);
    return v ? decodeMonitor(v).untilNs : 0n;
  }

  /** Whether the programs record events now (this reader's lease or another's). */
  isOn(): boolean {
    return this.deadline() > this.now();
  }

  /** Whether another reader's lease is running (a deadline ahead that this switch did not write). */
  otherReader(): boolean {
    const d = this.deadline();
    return d > this.now() && d !== this.written;
  }

  /** Sets the deadline `leaseNs` from now; returns it. */
  renew(leaseNs: bigint = MONITOR_LEASE_NS): bigint {
    const untilNs = this.now() + leaseNs;
    this.map.update(KEY, encodeMonitor({ untilNs }));
    this.written = untilNs;
    return untilNs;
  }

  /**
   * Turns the switch off, unless the deadline is no longer the one this
   * switch wrote (another reader renewed it since: its lease is left alone).
   * Returns whether it was turned off here.
   */
  release(): boolean {
    if (this.written === 0n) return false;
    const mine = this.deadline() === this.written;
    if (mine) this.map.update(KEY, encodeMonitor({ untilNs: 0n }));
    this.written = 0n;
    return mine;
  }
}
