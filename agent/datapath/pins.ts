import path from 'node:path';

/** Where kpr pins things under its bpffs directory. One place, shared by agent and CLI. */
export function mapPinDir(bpffsDir: string): string {
  return path.join(bpffsDir, 'maps');
}

export function mapPinPath(bpffsDir: string, mapName: string): string {
  return path.join(mapPinDir(bpffsDir), mapName);
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
