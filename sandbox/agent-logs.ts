/**
 * Following a kpr agent process's JSON log lines on stderr: every line kept,
 * and a wait for the first line that matches, failing with the last lines
 * when the agent exits or the time runs out. Shared by every sandbox.
 */
import { scaled } from './time-scale.js';
import type { ChildProcess } from 'node:child_process';

export type LogLine = Record<string, unknown>;

export interface AgentProcess {
  child: ChildProcess;
  /** Every JSON log line the agent wrote so far. */
  logs: LogLine[];
  /** Resolves with the first log line (from index `from`) whose msg is `match`, or that `match` accepts. */
  waitForLog(match: string | ((l: LogLine) => boolean), timeoutMs?: number, from?: number): Promise<LogLine>;
}

export function trackAgentLogs(label: string, child: ChildProcess): AgentProcess {
  const logs: LogLine[] = [];
  const waiters: Array<() => void> = [];
  let partial = '';
  let rawTail = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (d: string) => {
    partial += d;
    const lines = partial.split('\n');
    partial = lines.pop()!;
    for (const line of lines) {
      if (!line.trim()) continue;
      try {
        logs.push(JSON.parse(line));
      } catch {
        rawTail = (rawTail + line + '\n').slice(-4000);
      }
    }
    for (const w of waiters.splice(0)) w();
  });
  child.once('exit', () => waiters.splice(0).forEach((w) => w()));
  const waitForLog = (match: string | ((l: LogLine) => boolean), timeoutMs = 15_000, from = 0) =>
    new Promise<LogLine>((resolve, reject) => {
      const pred = typeof match === 'string' ? (l: LogLine) => l.msg === match : match;
      const what = typeof match === 'string' ? `"${match}"` : match.toString();
      const timer = setTimeout(
        () => reject(new Error(`${label} agent: no log line ${what} within ${scaled(timeoutMs)} ms; last lines: ${JSON.stringify(logs.slice(-8))} ${rawTail}`)),
        scaled(timeoutMs),
      );
      const check = () => {
        const hit = logs.slice(from).find(pred);
        if (hit) {
          clearTimeout(timer);
          return resolve(hit);
        }
        if (child.exitCode !== null || child.signalCode !== null) {
          clearTimeout(timer);
          return reject(
            new Error(`${label} agent exited (${child.exitCode ?? child.signalCode}) before logging ${what}: ${JSON.stringify(logs.slice(-8))} ${rawTail}`),
          );
        }
        waiters.push(check);
      };
      check();
    });
  return { child, logs, waitForLog };
}
