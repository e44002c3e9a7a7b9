/**
 * The node flags a build's bin/kpr-agent runs the agent with (its
 * KPR_NODE_FLAGS default), so an in-process benchmark child of that build
 * runs as its agent would: two builds compared side by side each get their own.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

/** bin/kpr-agent's flags before they were read from it (builds whose script does not say). */
const FALLBACK = ['--expose-gc', '--max-semi-space-size=2'];

/** The node flags of the build whose dist/ is `distRoot`, read from its bin/kpr-agent (`${KPR_NODE_FLAGS-…}`). */
export function agentNodeFlags(distRoot: string): string[] {
  let script: string;
  try {
    script = readFileSync(path.join(distRoot, '..', 'bin', 'kpr-agent'), 'utf8');
  } catch {
    return FALLBACK;
  }
  const m = /\$\{KPR_NODE_FLAGS-([^}]*)\}/.exec(script);
  return m ? m[1].split(/\s+/).filter(Boolean) : FALLBACK;
}
