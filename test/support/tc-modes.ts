/**
 * The tc attach modes a suite runs in, and what the kernel says is attached
 * in each. On a kernel with tcx (6.6+) a suite runs twice: in the default
 * mode (auto, which picks tcx there) and with `--tc-attach tc` forced; on
 * an older kernel it runs once, in the default mode, which must pick tc.
 */
import assert from 'node:assert/strict';
import { BPF_TC, KPR_TC_FILTER, queryTcFilter, queryTcxPrograms, tcxSupported, TCX } from '../../native/index.js';

export type TcMode = 'tcx' | 'tc';

export interface TcModeCase {
  /** What the suite's title says. */
  label: string;
  /** Agent flags that select the mode (none for the default). */
  args: string[];
  /** The mode the agent must pick. */
  mode: TcMode;
}

let tcx: boolean | undefined;
function kernelHasTcx(): boolean {
  tcx ??= tcxSupported();
  return tcx;
}

export function tcModeCases(): TcModeCase[] {
  if (!kernelHasTcx()) return [{ label: 'tc attach: auto → clsact filter (kernel without tcx)', args: [], mode: 'tc' }];
  return [
    { label: 'tc attach: auto → tcx link', args: [], mode: 'tcx' },
    { label: 'tc attach: --tc-attach tc (clsact filter)', args: ['--tc-attach', 'tc'], mode: 'tc' },
  ];
}

/** The ids of the programs kpr's attachment of `mode` runs on an interface's ingress (current namespace). */
export function kprIngressPrograms(mode: TcMode, ifname: string): number[] {
  if (mode === 'tcx') return queryTcxPrograms(ifname, TCX.INGRESS);
  const id = queryTcFilter(ifname, BPF_TC.INGRESS, KPR_TC_FILTER);
  return id === null ? [] : [id];
}

/** Programs of either mode on an interface's ingress, for "nothing of kpr here" checks (tcx only where the kernel has it). */
export function anyIngressPrograms(ifname: string): { tcx: number[]; tc: number[] } {
  return { tcx: kernelHasTcx() ? queryTcxPrograms(ifname, TCX.INGRESS) : [], tc: kprIngressPrograms('tc', ifname) };
}

/** The agent's 'tc attach mode' log line names the expected mode. */
export function assertAgentMode(logs: Array<Record<string, unknown>>, mode: TcMode, who: string): void {
  const line = logs.find((l) => l.msg === 'tc attach mode');
  assert.ok(line, `${who}: no 'tc attach mode' log line`);
  assert.equal(line.mode, mode, `${who} attaches in ${String(line.mode)} mode (${String(line.reason)}), expected ${mode}`);
}
