/**
 * Counts the reconciler's failed map operations without touching the
 * reconciler: a pass-through wrapper around its map writer that reports every
 * thrown KprBpfError (map and operation) and rethrows it unchanged.
 */
import { KprBpfError } from '../../native/index.js';

export type MapErrorSink = (map: string, op: string) => void;

/** Wraps every method of `maps`; whatever it adds later is covered too. */
export function instrumentMapErrors<T extends object>(maps: T, onError: MapErrorSink): T {
  return new Proxy(maps, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      return function (this: unknown, ...args: unknown[]) {
        try {
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        } catch (err) {
          if (err instanceof KprBpfError) onError(err.map ?? 'unknown', err.op);
          else onError('unknown', String(prop));
          throw err;
        }
      };
    },
  });
}
