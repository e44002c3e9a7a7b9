import path from 'node:path';
import { RINGS } from '../maps/registry.js';

/** Where kpr pins things under its bpffs directory. One place, shared by agent and CLI. */
export function mapPinDir(bpffsDir: string): string {
  return path.join(bpffsDir, 'maps');
}

/**
 * The ring buffers' pins: not in maps/, whose every pin versions before
 * them read as a map with entries (their `kpr map list`, `kpr status` and
 * map metrics would fail on a ring after a rollback).
 */
export function ringPinDir(bpffsDir: string): string {
  return path.join(bpffsDir, 'rings');
}

const RING_NAMES: ReadonlySet<string> = new Set(Object.values(RINGS).map((r) => r.name));

/** The pin of map `mapName`: maps/NAME, or rings/NAME for a ring buffer. */
export function mapPinPath(bpffsDir: string, mapName: string): string {
  return path.join(RING_NAMES.has(mapName) ? ringPinDir(bpffsDir) : mapPinDir(bpffsDir), mapName);
}

/** Where the objects pin their maps (BpfObject.open's pinMapsDir and pinPaths): maps/, the ring buffers in rings/. */
export function objectPins(bpffsDir: string): { pinMapsDir: string; pinPaths: Record<string, string> } {
  return { pinMapsDir: mapPinDir(bpffsDir), pinPaths: Object.fromEntries([...RING_NAMES].map((name) => [name, mapPinPath(bpffsDir, name)])) };
}

export function linkPinDir(bpffsDir: string): string {
  return path.join(bpffsDir, 'links');
}

export function linkPinPath(bpffsDir: string, programName: string): string {
  return path.join(linkPinDir(bpffsDir), programName);
}

/** The tcx links of the tc programs, one per interface (tcx mode only; clsact filters are not pinned). */
export function tcLinkPinDir(bpffsDir: string): string {
  return path.join(linkPinDir(bpffsDir), 'tc');
}
