/**
 * Work the agent does beside the sync loop once it runs (the node's tc
 * datapath, its node-wide settings): a failure is logged, counted and the
 * work retried with capped exponential backoff. Nothing here ever throws
 * into its caller, so no such failure can end the agent.
 */
import type { Logger } from '../log/log.js';

export const TASK_RETRY_MIN_MS = 500;
export const TASK_RETRY_MAX_MS = 30_000;

export interface RetryingTaskOptions {
  log: Logger;
  /** Called on every failure (the metric). */
  onFailure: (task: string, error: Error) => void;
  minMs?: number;
  maxMs?: number;
}

export class RetryingTask {
  private timer: NodeJS.Timeout | undefined;
  private delayMs: number;
  private stopped = false;
  /** Failures in a row (0 once the work succeeded). */
  failures = 0;

  constructor(
    readonly name: string,
    private readonly work: () => void,
    private readonly opts: RetryingTaskOptions,
  ) {
    this.delayMs = opts.minMs ?? TASK_RETRY_MIN_MS;
  }

  /** Runs the work now (a pending retry is folded into this run). Returns whether it succeeded. */
  run(): boolean {
    if (this.stopped) return false;
    clearTimeout(this.timer);
    this.timer = undefined;
    try {
      this.work();
    } catch (err) {
      const error = err instanceof Error ? err : new Error(String(err));
      this.failures++;
      this.opts.onFailure(this.name, error);
      this.opts.log.error('agent task failed, will retry', { task: this.name, error: error.message, failures: this.failures, retryInMs: this.delayMs });
      this.timer = setTimeout(() => this.run(), this.delayMs);
      this.timer.unref();
      this.delayMs = Math.min(this.opts.maxMs ?? TASK_RETRY_MAX_MS, this.delayMs * 2);
      return false;
    }
    if (this.failures > 0) this.opts.log.info('agent task recovered', { task: this.name, failures: this.failures });
    this.failures = 0;
    this.delayMs = this.opts.minMs ?? TASK_RETRY_MIN_MS;
    return true;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
