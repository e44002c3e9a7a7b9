/**
 * Turns the per-Service datapath counters off and on under a running agent,
 * for the side-by-side cost arm of the data-plane benchmarks: the
 * KPR_CFG_F_NO_SVC_STATS bit of the pinned kpr_config, exactly what
 * `--service-counters false` writes. The agent's periodic resync repairs
 * kpr_config to its flags, so each round checks afterwards that the bit
 * held (isOff) and is run again if it did not.
 */
import { BpfMap } from '../native/index.js';
import { mapPinPath } from '../agent/datapath/pins.js';
import { CFG_FLAG, MAP_NAMES, encodeConfig, decodeConfig } from '../agent/maps/layout.js';
import { CONFIG_KEY } from '../agent/datapath/loader.js';

export interface CounterSwitch {
  /** Sets the datapath's counters on or off. */
  set(on: boolean): void;
  /** Whether the counters are off right now. */
  isOff(): boolean;
}

export function counterSwitch(bpffsDir: string): CounterSwitch {
  const pin = mapPinPath(bpffsDir, MAP_NAMES.config);
  const withConfig = <T>(f: (m: BpfMap) => T): T => {
    const m = BpfMap.openPinned(pin);
    try {
      return f(m);
    } finally {
      m.close();
    }
  };
  return {
    set: (on) =>
      withConfig((m) => {
        const cfg = decodeConfig(m.lookup(CONFIG_KEY)!);
        cfg.flags = on ? cfg.flags & ~CFG_FLAG.NO_SVC_STATS : cfg.flags | CFG_FLAG.NO_SVC_STATS;
        m.update(CONFIG_KEY, encodeConfig(cfg));
      }),
    isOff: () => withConfig((m) => (decodeConfig(m.lookup(CONFIG_KEY)!).flags & CFG_FLAG.NO_SVC_STATS) !== 0),
  };
}

/**
 * Runs one round with the counters off and turns them on again; a round
 * during which the agent's resync turned them back on is run once more.
 */
export async function withCountersOff<T>(sw: CounterSwitch, round: () => Promise<T>, log: (m: string) => void): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    sw.set(false);
    try {
      const r = await round();
      if (sw.isOff() || attempt > 0) return r;
      log('  counters were turned back on during the round (agent resync): round run again');
    } finally {
      sw.set(true);
    }
  }
}
