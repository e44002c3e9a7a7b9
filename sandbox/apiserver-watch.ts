/**
 * The sandbox API server's watch streams: each a chunked JSON response of
 * events through its selector (a MODIFIED that moves an object in or out of it
 * becoming ADDED or DELETED), started from the current state or resumed from
 * the store's retained history (410 Expired below it), with periodic BOOKMARKs
 * and timeoutSeconds; and the faults tests inject into them (streams ended
 * cleanly or cut, new watches held as in a partition).
 */
import type { ServerResponse } from 'node:http';
import type { ResourceDef } from './apiserver-resources.js';
import { selectorMatches, type KubeObject, type Selector } from './apiserver-selectors.js';
import { statusObject } from './apiserver-status.js';
import type { Store, StoreEvent } from './apiserver-store.js';

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

interface Watcher {
  def: ResourceDef;
  sel: Selector;
  res: ServerResponse;
  bookmarks: boolean;
  timer?: NodeJS.Timeout;
  closed: boolean;
}

/** How one store event looks through a watcher's selector (real apiserver semantics), or null. */
function translate(sel: Selector, ev: StoreEvent): [WatchEventType, KubeObject] | null {
  const now = selectorMatches(sel, ev.object);
  if (ev.type === 'ADDED') return now ? ['ADDED', ev.object] : null;
  if (ev.type === 'DELETED') return now ? ['DELETED', ev.object] : null;
  const before = selectorMatches(sel, ev.prev);
  if (now && before) return ['MODIFIED', ev.object];
  if (now) return ['ADDED', ev.object];
  if (before) return ['DELETED', ev.object];
  return null;
}

export class WatchStreams {
  private readonly watchers = new Set<Watcher>();
  private paused = false;
  private held: Array<{ start: () => void; gone: boolean }> = [];
  private readonly bookmarkTimer: NodeJS.Timeout | undefined;

  /** `bookmarkIntervalMs`: the interval of BOOKMARK events on watches that allow them; 0 disables. */
  constructor(
    private readonly store: Store,
    bookmarkIntervalMs: number,
  ) {
    store.subscribe((ev) => {
      for (const w of this.watchers) {
        if (w.def !== ev.def) continue;
        const t = translate(w.sel, ev);
        if (t) this.send(w, t[0], t[1]);
      }
    });
    this.bookmarkTimer =
      bookmarkIntervalMs > 0
        ? setInterval(() => {
            const rv = String(store.currentRv());
            for (const w of this.watchers) {
              if (w.bookmarks) this.send(w, 'BOOKMARK', { kind: w.def.kind, apiVersion: w.def.apiVersion, metadata: { resourceVersion: rv } });
            }
          }, bookmarkIntervalMs)
        : undefined;
    this.bookmarkTimer?.unref();
  }

  /** Number of open watch streams. */
  get count(): number {
    return this.watchers.size;
  }

  /** Number of watch requests held by pause() whose client is still connected. */
  get heldCount(): number {
    return this.held.filter((h) => !h.gone).length;
  }

  /** Answers a watch request on `def` (query `q`: resourceVersion, allowWatchBookmarks, timeoutSeconds); held while paused. */
  start(def: ResourceDef, q: URLSearchParams, sel: Selector, res: ServerResponse): void {
    if (this.paused) {
      const h = { start: () => void (!h.gone && this.open(def, q, sel, res)), gone: false };
      res.on('close', () => (h.gone = true));
      this.held.push(h);
      return;
    }
    this.open(def, q, sel, res);
  }

  /** Ends every stream cleanly (clients resume from their last resourceVersion); returns how many. */
  drop(): number {
    const n = this.watchers.size;
    for (const w of [...this.watchers]) this.end(w);
    return n;
  }

  /** Ends every stream and holds new watch requests unanswered (a partition) until resume(). */
  pause(): void {
    this.paused = true;
    for (const w of [...this.watchers]) this.end(w);
  }

  resume(): void {
    this.paused = false;
    const pending = this.held;
    this.held = [];
    for (const h of pending) h.start();
  }

  /** Cuts every stream: "reset" destroys the connection mid-stream (a server process dying), "clean" ends it normally. */
  cut(mode: 'reset' | 'clean'): void {
    for (const w of [...this.watchers]) {
      if (mode === 'clean') this.end(w);
      else {
        w.closed = true;
        if (w.timer) clearTimeout(w.timer);
        this.watchers.delete(w);
        w.res.destroy();
      }
    }
  }

  /** Stops the bookmarks, ends every stream and forgets the held requests. */
  close(): void {
    if (this.bookmarkTimer) clearInterval(this.bookmarkTimer);
    for (const w of [...this.watchers]) this.end(w);
    this.held = [];
  }

  private open(def: ResourceDef, q: URLSearchParams, sel: Selector, res: ServerResponse): void {
    const rvParam = q.get('resourceVersion') ?? '';
    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private', 'Transfer-Encoding': 'chunked' });
    res.flushHeaders();
    const w: Watcher = { def: def, sel, res, bookmarks: ['true', '1'].includes(q.get('allowWatchBookmarks') ?? ''), closed: false };
    res.on('close', () => this.end(w));
    if (rvParam === '' || rvParam === '0') {
      // "Get state and start at most recent": synthetic ADDED events for the current state.
      for (const o of this.store.list(def)) if (selectorMatches(sel, o)) this.send(w, 'ADDED', o);
    } else {
      const rv = Number(rvParam);
      if (!Number.isInteger(rv) || rv < 0) {
        this.send(w, 'ERROR', statusObject(400, 'BadRequest', `invalid resource version: ${rvParam}`));
        this.end(w);
        return;
      }
      if (!this.store.canResumeFrom(rv)) {
        this.send(w, 'ERROR', statusObject(410, 'Expired', `too old resource version: ${rv} (${this.store.oldestAvailableRv()})`));
        this.end(w);
        return;
      }
      for (const ev of this.store.eventsAfter(rv)) {
        if (ev.def !== def) continue;
        const t = translate(sel, ev);
        if (t) this.send(w, t[0], t[1]);
      }
    }
    const timeout = Number(q.get('timeoutSeconds') ?? '');
    if (Number.isFinite(timeout) && timeout > 0) w.timer = setTimeout(() => this.end(w), timeout * 1000);
    this.watchers.add(w);
  }

  private send(w: Watcher, type: WatchEventType, object: unknown): void {
    if (w.closed) return;
    w.res.write(JSON.stringify({ type, object }) + '\n');
  }

  private end(w: Watcher): void {
    if (w.closed) return;
    w.closed = true;
    if (w.timer) clearTimeout(w.timer);
    this.watchers.delete(w);
    w.res.end();
  }
}
