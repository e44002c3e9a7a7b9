/**
 * Structured JSON logs (pino). Levels map to klog's -v verbosity the way
 * kube-proxy operators expect: -v=0..1 info, -v=2..3 debug, -v>=4 trace.
 */
import { pino } from 'pino';

export type Fields = Record<string, unknown>;

export interface Logger {
  error(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  debug(msg: string, fields?: Fields): void;
  child(bindings: Fields): Logger;
}

export type LogLevel = 'error' | 'warn' | 'info' | 'debug' | 'trace';

export function levelFromVerbosity(v: number): LogLevel {
  if (v >= 4) return 'trace';
  if (v >= 2) return 'debug';
  return 'info';
}

function wrap(p: pino.Logger): Logger {
  return {
    error: (msg, fields) => p.error(fields ?? {}, msg),
    warn: (msg, fields) => p.warn(fields ?? {}, msg),
    info: (msg, fields) => p.info(fields ?? {}, msg),
    debug: (msg, fields) => p.debug(fields ?? {}, msg),
    child: (bindings) => wrap(p.child(bindings)),
  };
}

/** A logger writing JSON lines to stderr (stdout stays free for CLI output). */
export function createLogger(level: LogLevel = 'info', bindings: Fields = {}): Logger {
  return wrap(pino({ level, base: { component: 'kpr', ...bindings } }, pino.destination(2)));
}

/** A logger that drops everything; for tests and quiet CLI paths. */
export const silentLogger: Logger = {
  error() {},
  warn() {},
  info() {},
  debug() {},
  child: () => silentLogger,
};

/** The process's memory in MiB, for the lines that mark start-up phases (RSS is what the node pays). */
export function memoryFields(): { rssMiB: number; heapUsedMiB: number; heapTotalMiB: number } {
  const m = process.memoryUsage();
  const mib = (n: number) => Math.round(n / 104857.6) / 10;
  return { rssMiB: mib(m.rss), heapUsedMiB: mib(m.heapUsed), heapTotalMiB: mib(m.heapTotal) };
}
