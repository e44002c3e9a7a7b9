/**
 * YAML (and JSON, which is YAML) from files a user names, parsed with limits
 * so that a small hostile file cannot take minutes, gigabytes or the stack:
 *
 *  - aliases: at most `maxAliasCount` expansions (eemeli/yaml's own counter),
 *    so a "billion laughs" document is refused instead of expanded;
 *  - nesting: at most `maxDepth` collections inside one another, checked on
 *    the parser's token tree before the (recursive) composer runs, and again
 *    with aliases expanded before the document becomes JavaScript values;
 *  - an alias that refers to a node containing it (a cycle, which go-yaml
 *    refuses as "anchor value contains itself") is refused too.
 *
 * Repeated keys are found here in one pass (the library's own check compares
 * every key with every other: minutes for a 1 MiB file of keys). A text that
 * looks like JSON may go to JSON.parse first (`jsonFirst`): the same values,
 * many times faster for `kubectl get -o json` dumps; nesting is counted on the
 * text before parsing. If JSON.parse fails, the text is read as YAML.
 *
 * Schema: YAML 1.2 core with `<<` merge keys, as js-yaml (used before) and
 * go-yaml read Kubernetes manifests; timestamps stay strings.
 */
import { Composer, CST, isAlias, isCollection, isMap, isPair, isScalar, LineCounter, Parser, type Document, type Node } from 'yaml';

export interface YamlLimits {
  /** Most collections inside one another (a flat mapping is 1). */
  maxDepth: number;
  /** Most alias expansions in one document. */
  maxAliasCount: number;
  /** Whether a repeated mapping key is an error (true) or the last one wins (false). */
  uniqueKeys: boolean;
  /** Try JSON.parse first on a text starting with { or [ (only with uniqueKeys false: JSON.parse keeps the last of repeated keys). */
  jsonFirst?: boolean;
}

/** Why a text is not acceptable YAML; the message says where (line, column). */
export class YamlInputError extends Error {}

type Where = (offset: number) => string;

function whereIn(lines: LineCounter): Where {
  return (offset) => {
    const { line, col } = lines.linePos(offset);
    return `line ${line}, column ${col}`;
  };
}

/** Collections directly below a token tree node. */
function childTokens(token: CST.Token): CST.Token[] {
  switch (token.type) {
    case 'document':
      return token.value ? [token.value] : [];
    case 'block-map':
    case 'block-seq':
    case 'flow-collection': {
      const out: CST.Token[] = [];
      for (const item of token.items as CST.CollectionItem[]) {
        if (item.key) out.push(item.key);
        if (item.value) out.push(item.value);
      }
      return out;
    }
    default:
      return [];
  }
}

/** Throws if a document's token tree nests collections deeper than maxDepth (iterative: the depth is what is being checked). */
function checkTokenDepth(doc: CST.Token, maxDepth: number, where: Where): void {
  const stack: Array<[CST.Token, number]> = [[doc, 0]];
  while (stack.length) {
    const [token, depth] = stack.pop()!;
    const d = CST.isCollection(token) ? depth + 1 : depth;
    if (d > maxDepth) throw new YamlInputError(`nesting deeper than the limit of ${maxDepth} levels at ${where(token.offset)}`);
    for (const child of childTokens(token)) stack.push([child, d]);
  }
}

/**
 * Throws if, with aliases expanded, collections nest deeper than maxDepth, an
 * alias refers to a node that contains it, or (uniqueKeys) a mapping repeats
 * a key. Recursive, but it stops at maxDepth levels (the token check above
 * bounds the tree without aliases).
 */
function checkNodes(doc: Document.Parsed, maxDepth: number, uniqueKeys: boolean, where: Where): void {
  const anchors = new Map<string, Node>();
  const heights = new Map<Node, number>();
  const open = new Set<Node>();
  const offset = (n: unknown) => ((n as Node).range ? (n as Node).range![0] : 0);
  const tooDeep = (n: unknown) => new YamlInputError(`nesting deeper than the limit of ${maxDepth} levels (with aliases expanded) at ${where(offset(n))}`);

  // Height of `node` (collections from it down, itself included); `level`: collections above it.
  const height = (node: unknown, level: number): number => {
    if (isAlias(node)) {
      const target = anchors.get(node.source);
      if (!target) return 0; // unresolved: the composer has reported it
      if (open.has(target)) throw new YamlInputError(`alias *${node.source} at ${where(offset(node))} refers to a node that contains it`);
      const h = heights.get(target) ?? 0;
      if (level + h > maxDepth) throw tooDeep(node);
      return h;
    }
    if (isPair(node)) return Math.max(height(node.key, level), height(node.value, level));
    const n = node as Node | null;
    if (!n || typeof n !== 'object') return 0;
    if (n.anchor) anchors.set(n.anchor, n);
    let h = 0;
    if (isCollection(n)) {
      if (level + 1 > maxDepth) throw tooDeep(n);
      if (uniqueKeys && isMap(n)) checkUniqueKeys(n.items, where);
      open.add(n);
      for (const item of n.items) h = Math.max(h, height(item, level + 1));
      open.delete(n);
      h += 1;
    }
    if (n.anchor) heights.set(n, h);
    return h;
  };
  height(doc.contents, 0);
}

/** Throws on the second of two equal scalar keys (the library's equality: same value, same type). */
function checkUniqueKeys(pairs: ReadonlyArray<{ key: unknown }>, where: Where): void {
  const seen = new Set<unknown>();
  for (const { key } of pairs) {
    if (!isScalar(key)) continue;
    if (seen.has(key.value))
      throw new YamlInputError(`Map keys must be unique: ${JSON.stringify(key.value)} repeats at ${where(key.range ? key.range[0] : 0)}`);
    seen.add(key.value);
  }
}

/**
 * If `text` is a JSON value no deeper than maxDepth, that value; undefined if
 * it is not JSON. The depth is counted on the text first, so JSON.parse never
 * sees a deeper one.
 */
function parseJson(text: string, maxDepth: number): { value: unknown } | undefined {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > maxDepth) {
        const before = text.slice(0, i);
        const line = before.split('\n').length;
        throw new YamlInputError(`nesting deeper than the limit of ${maxDepth} levels at line ${line}, column ${i - before.lastIndexOf('\n')}`);
      }
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  try {
    return { value: JSON.parse(text) };
  } catch {
    return undefined;
  }
}

/** Every document of `text` as JavaScript values (an empty text has none). Throws YamlInputError. */
export function parseYamlDocuments(text: string, limits: YamlLimits): unknown[] {
  if (limits.jsonFirst && !limits.uniqueKeys && /^\uFEFF?\s*[[{]/.test(text)) {
    const json = parseJson(text.replace(/^\uFEFF/, ''), limits.maxDepth);
    if (json) return [json.value];
  }
  const lines = new LineCounter();
  const where = whereIn(lines);
  // One document at a time (tokens, nodes and values), so memory is the values plus one document's worth.
  const checked = function* (tokens: Iterable<CST.Token>) {
    for (const token of tokens) {
      checkTokenDepth(token, limits.maxDepth, where);
      yield token;
    }
  };
  const composer = new Composer({ merge: true, uniqueKeys: false, logLevel: 'error' });
  const out: unknown[] = [];
  for (const doc of composer.compose(checked(new Parser(lines.addNewLine).parse(text)))) {
    const err = doc.errors[0];
    if (err) throw new YamlInputError(`${err.message} at ${where(err.pos[0])}`);
    checkNodes(doc, limits.maxDepth, limits.uniqueKeys, where);
    try {
      out.push(doc.toJS({ maxAliasCount: limits.maxAliasCount }));
    } catch (e) {
      const msg = (e as Error).message;
      if (/alias count/i.test(msg)) throw new YamlInputError(`aliases expand beyond the limit of ${limits.maxAliasCount} (an alias bomb?)`);
      throw new YamlInputError(msg);
    }
  }
  return out;
}
