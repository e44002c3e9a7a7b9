/**
 * Structured JSON logs (pino). Levels map to klog's -v verbosity the way
 * kube-proxy operators expect: -v=0..1 info, -v=2..3 debug, -v>=4 trace.
 *
 * Every line is bounded here, whoever writes it: field strings are cut at
 * MAX_FIELD_CHARS, arrays at MAX_ARRAY_ITEMS, objects at MAX_OBJECT_KEYS and
 * MAX_DEPTH levels, the message at MAX_MESSAGE_CHARS, each cut marked with
 * "…(N more)". A 100 KB annotation echoed into a field costs a line of a few
 * hundred bytes, not 100 KB.
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

/** Longest string kept in a log field (characters); the rest is replaced by "…(N more)". */
export const MAX_FIELD_CHARS = 512;
/** Longest message kept. */
export const MAX_MESSAGE_CHARS = 1024;
/** Most array items kept in a field; the rest become one "…(N more)" item. */
export const MAX_ARRAY_ITEMS = 32;
/** Most keys kept in an object field. */
export const MAX_OBJECT_KEYS = 32;
/** Nesting kept below the fields object; deeper values become "…". */
export const MAX_DEPTH = 4;

/** `s` cut to `max` characters, marked with how many were left out. */
export function cutString(s: string, max = MAX_FIELD_CHARS): string {
  return s.length <= max ? s : `${s.slice(0, max)}…(${s.length - max} more)`;
}

function boundValue(v: unknown, depth: number): unknown {
  if (typeof v === 'string') return cutString(v);
  if (v === null || typeof v !== 'object') return v;
  if (depth >= MAX_DEPTH) return '…';
  if (Array.isArray(v)) {
    const n = Math.min(v.length, MAX_ARRAY_ITEMS);
    const out: unknown[] = new Array(n);
    for (let i = 0; i < n; i++) out[i] = boundValue(v[i], depth + 1);
    if (v.length > n) out.push(`…(${v.length - n} more)`);
    return out;
  }
  if (v instanceof Error) return { type: v.name, message: cutString(v.message), ...(v.stack ? { stack: cutString(v.stack) } : {}) };
  if (v instanceof Date || Buffer.isBuffer(v) || ArrayBuffer.isView(v)) return Buffer.isBuffer(v) || ArrayBuffer.isView(v) ? `<${v.byteLength} bytes>` : v;
  return boundObject(v as Record<string, unknown>, depth + 1);
}

function boundObject(o: Record<string, unknown>, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  let kept = 0;
  let left = 0;
  for (const k in o) {
    if (!Object.prototype.hasOwnProperty.call(o, k)) continue;
    if (kept === MAX_OBJECT_KEYS) {
      left++;
      continue;
    }
    out[cutString(k, 64)] = boundValue(o[k], depth);
    kept++;
  }
  if (left > 0) out['…'] = `(${left} more keys)`;
  return out;
}

/** The fields of a log line with every string, array and object bounded (see the module comment). */
export function boundFields(fields: Fields | undefined): Fields {
  return fields === undefined ? {} : boundObject(fields, 0);
}

function wrap(p: pino.Logger): Logger {
  const at = (level: 'error' | 'warn' | 'info' | 'debug') => (msg: string, fields?: Fields) => {
    if (!p.isLevelEnabled(level)) return; // dropped lines cost no bounding
    p[level](boundFields(fields), cutString(String(msg), MAX_MESSAGE_CHARS));
  };
  return {
    error: at('error'),
    warn: at('warn'),
    info: at('info'),
    debug: at('debug'),
    child: (bindings) => wrap(p.child(boundFields(bindings))),
  };
}

/** A logger writing JSON lines to stderr (stdout stays free for CLI output). */
export function createLogger(level: LogLevel = 'info', bindings: Fields = {}): Logger {
  return loggerTo(pino.destination(2), level, bindings);
}

/** A logger writing JSON lines to `stream` (createLogger's, for tests that read the lines back). */
export function loggerTo(stream: pino.DestinationStream, level: LogLevel = 'info', bindings: Fields = {}): Logger {
  return wrap(pino({ level, base: { component: 'kpr', ...boundFields(bindings) } }, stream));
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
