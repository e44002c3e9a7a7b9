import path from 'node:path';
import { findRepoRoot, defaultBpfObject } from '../agent/runtime/paths.js';

export const repoRoot = findRepoRoot();
export const bpfObjectPath = defaultBpfObject();
export const agentBin = path.join(repoRoot, 'bin', 'kpr-agent');
export const cliBin = path.join(repoRoot, 'bin', 'kpr');
