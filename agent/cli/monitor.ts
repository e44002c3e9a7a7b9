/**
 * `kpr monitor`: a live stream of the datapath's decisions. It turns the
 * events on (kpr_monitor, renewed every second: monitor-switch.ts), reads
 * the kpr_events ring buffer every MONITOR_POLL_MS (native/ring-buffer.ts),
 * names each one (monitor-events.ts) and prints it, until --count,
 * --duration, SIGINT or SIGTERM; then turns the events off again.
 */
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { RingBuffer, type BpfMap } from '../../native/index.js';
import { mapPinPath } from '../datapath/pins.js';
import { parseDuration } from '../config/duration.js';
import { MAP_NAMES, STAT, decodeEvent, mapCodecs, type SvcMeta } from '../maps/layout.js';
import { MAPS } from '../maps/registry.js';
import { readStat } from '../datapath/datapath-stats.js';
import { CliError, openPinnedMap } from './pinned-maps.js';
import { UsageError } from './errors.js';
import { parseCommand } from './command-spec.js';
import { commandSpec } from './commands.js';
import { MONITOR_RENEW_MS, MonitorSwitch } from './monitor-switch.js';
import {
  EVENT_TABLE_HEADER,
  describeEvent,
  eventMatches,
  formatEventRow,
  parseEventTypes,
  wallClock,
  type EventFilter,
  type FrontendNames,
} from './monitor-events.js';
import { parseEndpoint } from './trace.js';

/**
 * How often the ring is read. The programs submit without a wakeup
 * (kpr_monitor.h), so this is the events' delay on screen; the ring's
 * ~2,500 records then hold ~100,000 events/s before any is lost.
 */
export const MONITOR_POLL_MS = 25;
/** A name read from kpr_svc_meta is trusted this long (frontend ids are reused after a Service goes). */
const NAME_TTL_MS = 1000;

export interface MonitorIo {
  out: NodeJS.WritableStream & { writableNeedDrain?: boolean };
  err: NodeJS.WritableStream;
  /** Where SIGINT/SIGTERM are listened for. */
  signals: Pick<NodeJS.Process, 'once' | 'removeListener'>;
}

/** kpr_svc_meta lookups, cached for NAME_TTL_MS; none when the map is not pinned. */
function frontendNames(meta: BpfMap | undefined): FrontendNames {
  const codecs = mapCodecs(MAPS.svcMeta);
  const cache = new Map<number, { meta: SvcMeta | undefined; atMs: number }>();
  return (id) => {
    if (!meta) return undefined;
    const hit = cache.get(id);
    const now = Date.now();
    if (hit && now - hit.atMs < NAME_TTL_MS) return hit.meta;
    const raw = meta.lookup(codecs.key.encode(id));
    const m = raw ? codecs.value.decode(raw) : undefined;
    cache.set(id, { meta: m, atMs: now });
    return m;
  };
}

function parseCount(text: string | undefined): number {
  if (text === undefined) return Infinity;
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < 1) throw new UsageError(`invalid --count "${text}" (a whole number ≥ 1)`);
  return n;
}

function openMonitorMaps(bpffs: string): { monitor: BpfMap; events: BpfMap; meta?: BpfMap; stats?: BpfMap } {
  const pinned = (name: string) => existsSync(mapPinPath(bpffs, name));
  if (!pinned(MAP_NAMES.monitor) && pinned(MAP_NAMES.svc)) {
    throw new CliError(
      `${mapPinPath(bpffs, MAP_NAMES.monitor)} is not pinned: the kpr agent on this node predates kpr monitor (its datapath has no event stream); upgrade it`,
    );
  }
  const monitor = openPinnedMap(bpffs, MAP_NAMES.monitor);
  const opened: BpfMap[] = [monitor];
  try {
    const events = openPinnedMap(bpffs, MAP_NAMES.events);
    opened.push(events);
    const meta = pinned(MAP_NAMES.svcMeta) ? openPinnedMap(bpffs, MAP_NAMES.svcMeta) : undefined;
    if (meta) opened.push(meta);
    const stats = pinned(MAP_NAMES.stats) ? openPinnedMap(bpffs, MAP_NAMES.stats) : undefined;
    return { monitor, events, ...(meta ? { meta } : {}), ...(stats ? { stats } : {}) };
  } catch (err) {
    for (const m of opened) m.close();
    throw err;
  }
}

interface MonitorOptions {
  bpffs: string;
  json: boolean;
  count: number;
  durationMs?: number;
  filter: EventFilter;
}

/** The flags, checked. */
function parseMonitorArgs(argv: string[]): MonitorOptions {
  const { values: v } = parseCommand(commandSpec('monitor'), argv);
  const values = v as Record<string, string | undefined>;
  const opts: MonitorOptions = { bpffs: values.bpffs!, json: values.output === 'json', count: parseCount(values.count), filter: {} };
  if (values.duration !== undefined) {
    try {
      opts.durationMs = parseDuration(values.duration, '--duration');
    } catch (err) {
      throw new UsageError((err as Error).message, 'monitor');
    }
    if (opts.durationMs <= 0) throw new UsageError(`invalid --duration "${values.duration}" (more than 0)`);
  }
  if (values.frontend !== undefined) opts.filter.frontend = parseEndpoint(values.frontend, '--frontend', true);
  if (values.type !== undefined) {
    const { types, unknown } = parseEventTypes(values.type);
    if (unknown.length || types.size === 0)
      throw new UsageError(`invalid --type "${values.type}": ${unknown.length ? `unknown ${unknown.join(', ')}` : 'empty'} (see kpr monitor --help)`);
    opts.filter.types = types;
  }
  return opts;
}

/** A pause of `ms` that stop() cuts short. */
class Napper {
  private pending: { timer: NodeJS.Timeout; done: () => void } | undefined;
  stopped = false;

  /** Ends the pause before it (one at a time), then pauses. */
  nap(ms: number): Promise<void> {
    this.wake();
    if (this.stopped) return Promise.resolve();
    return new Promise((done) => (this.pending = { timer: setTimeout(done, ms), done }));
  }

  stop(): void {
    this.stopped = true;
    this.wake();
  }

  private wake(): void {
    if (!this.pending) return;
    clearTimeout(this.pending.timer);
    this.pending.done();
    this.pending = undefined;
  }
}

export async function monitorCommand(argv: string[], io: MonitorIo = { out: process.stdout, err: process.stderr, signals: process }): Promise<string> {
  const opts = parseMonitorArgs(argv);
  const maps = openMonitorMaps(opts.bpffs);
  const sw = new MonitorSwitch(maps.monitor);
  const lostBefore = maps.stats ? readStat(maps.stats, STAT.MONITOR_LOST) : 0n;
  const names = frontendNames(maps.meta);
  const wall = wallClock();
  const napper = new Napper();
  const stop = () => napper.stop();
  const write = (line: string) => io.out.write(line + '\n');
  let shown = 0;
  const ring = new RingBuffer(maps.events, (raw) => {
    if (shown >= opts.count) return;
    const ev = describeEvent(decodeEvent(raw), names, wall);
    if (!eventMatches(ev, opts.filter)) return;
    write(opts.json ? JSON.stringify(ev) : formatEventRow(ev));
    if (++shown >= opts.count) stop();
  });
  io.out.on('error', stop); // EPIPE: the reader of our output is gone (`| head`)
  io.signals.once('SIGINT', stop);
  io.signals.once('SIGTERM', stop);
  const timers: NodeJS.Timeout[] = [];
  try {
    if (sw.otherReader()) io.err.write("kpr monitor: another kpr monitor is reading this node's events: each event goes to one of you\n");
    sw.renew();
    timers.push(setInterval(() => sw.renew(), MONITOR_RENEW_MS));
    if (opts.durationMs !== undefined) timers.push(setTimeout(stop, opts.durationMs));
    io.err.write(`kpr monitor: events on (${opts.bpffs}); stop with ctrl-c\n`);
    if (!opts.json) write(EVENT_TABLE_HEADER);
    while (!napper.stopped) {
      await napper.nap(MONITOR_POLL_MS);
      ring.consume();
      // A slow reader of our output: wait for it (the ring fills meanwhile, and counts what it loses).
      if (io.out.writableNeedDrain && !napper.stopped) await Promise.race([once(io.out, 'drain'), napper.nap(60_000)]);
    }
  } finally {
    for (const t of timers) clearTimeout(t);
    napper.stop();
    io.signals.removeListener('SIGINT', stop);
    io.signals.removeListener('SIGTERM', stop);
    sw.release();
    // What was recorded before the switch went off, up to --count.
    if (shown < opts.count) ring.consume();
    ring.close();
    io.out.removeListener('error', stop);
    const lost = maps.stats ? readStat(maps.stats, STAT.MONITOR_LOST) - lostBefore : 0n;
    for (const m of [maps.monitor, maps.events, maps.meta, maps.stats]) m?.close();
    io.err.write(
      `kpr monitor: ${shown} event${shown === 1 ? '' : 's'} shown${lost > 0n ? `, ${lost} lost (the ring buffer was full; node-wide count)` : ''}; events off\n`,
    );
  }
  return '';
}
