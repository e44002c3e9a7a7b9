/**
 * What the image builder reads from the repository, parsed: tools/node.env
 * (the Node LTS pinned for the tests and the image), esbuild's metafile
 * inputs (which npm packages' code is inside the bundles) and bin/kpr-agent's
 * node flags (the image's entrypoint; the benches start the agent with them
 * too). Pure.
 */

export interface NodeEnv {
  version: string;
  lts: string;
  /** sha512 integrity of node-linux-<arch>, by npm's arch name (x64, arm64). */
  integrity: Record<string, string>;
}

/** Reads tools/node.env: KEY=VALUE lines, # comments. */
export function readNodeEnv(text: string): NodeEnv {
  const vars = new Map<string, string>();
  for (const line of text.split('\n')) {
    const m = /^\s*([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (m) vars.set(m[1], m[2].trim());
  }
  const version = vars.get('KPR_NODE_VERSION');
  const lts = vars.get('KPR_NODE_LTS');
  if (!version || !lts) throw new Error('tools/node.env: KPR_NODE_VERSION and KPR_NODE_LTS are required');
  const integrity: Record<string, string> = {};
  for (const [k, v] of vars) {
    const m = /^KPR_NODE_INTEGRITY_(\w+)$/.exec(k);
    if (m) integrity[m[1]] = v;
  }
  return { version, lts, integrity };
}

/**
 * The package directories (as package-lock.json keys: node_modules/a,
 * node_modules/@s/b, node_modules/a/node_modules/c) that esbuild inputs come
 * from, sorted and once each.
 */
export function bundledNpmPackages(inputs: string[]): string[] {
  const dirs = new Set<string>();
  for (const input of inputs) {
    // From the first node_modules/ on: a checkout whose node_modules is a link elsewhere has ../other/node_modules/… inputs.
    const at = input.indexOf('node_modules/');
    const m = at < 0 ? null : /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input.slice(at));
    if (m) dirs.add(m[1]);
  }
  return [...dirs].sort();
}

/** The node flags bin/kpr-agent runs the agent with (its `${KPR_NODE_FLAGS-…}` default): the image's entrypoint runs node with the same. */
export function agentNodeFlagsOf(script: string): string[] {
  const m = /\$\{KPR_NODE_FLAGS-([^}]*)\}/.exec(script);
  if (!m) throw new Error('bin/kpr-agent does not name its node flags as ${KPR_NODE_FLAGS-…}');
  return m[1].split(/\s+/).filter(Boolean);
}
