/**
 * Joins parts into one flat string, for keys that live as long as the object
 * they name (cache keys, frontend ids). A template literal longer than 12
 * characters is a tree of V8 cons strings (32 bytes per `+`) that stays alive
 * with the key; Array.prototype.join builds one sequential string. At 10,000
 * Services with a dozen long-lived keys each, that is ~4 MiB.
 *
 * The parts are joined as they are: callers pick a separator their parts
 * cannot contain, or use namespacedKey.
 */
export function flatKey(sep: string, ...parts: Array<string | number>): string {
  return parts.join(sep);
}

/**
 * "namespace/name", unambiguous whatever the parts hold: a "/" or "%" inside
 * a part is percent-escaped, so "a/b"+"c" and "a"+"b/c" get different keys.
 * Valid Kubernetes names (DNS labels and subdomains, which the watcher's
 * validation enforces) contain neither, so their key is the plain
 * "namespace/name" that logs and `kpr plan` print.
 */
export function namespacedKey(namespace: string, name: string): string {
  return flatKey('/', escapePart(namespace), escapePart(name));
}

function escapePart(s: string): string {
  return s.includes('/') || s.includes('%') ? s.replace(/%/g, '%25').replace(/\//g, '%2F') : s;
}
