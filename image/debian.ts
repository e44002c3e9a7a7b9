/**
 * Debian package metadata for the image: control paragraphs (deb822, as
 * `dpkg-deb -f` prints them), and the dpkg status database the image carries
 * so that `dpkg -l` inside it and SBOM scanners see what is installed. The
 * extract variant of mmdebstrap unpacks packages without dpkg, which would
 * leave that database empty. Pure.
 */

export interface DebPackage {
  name: string;
  version: string;
  architecture: string;
  /** The source package (name only), the package's own name when it has none. */
  source: string;
  sourceVersion: string;
  /** The whole control paragraph, fields in the package's order. */
  fields: Array<[string, string]>;
}

/** Parses one deb822 paragraph: "Field: value" lines, continuation lines start with a space or tab. */
export function parseControl(text: string): Array<[string, string]> {
  const fields: Array<[string, string]> = [];
  for (const line of text.replace(/\n+$/, '').split('\n')) {
    if (line === '') throw new Error('a control paragraph has an empty line');
    if (/^[ \t]/.test(line)) {
      if (fields.length === 0) throw new Error(`continuation line before any field: ${line}`);
      fields[fields.length - 1][1] += `\n${line}`;
      continue;
    }
    const m = /^([^:\s]+):[ \t]*(.*)$/.exec(line);
    if (!m) throw new Error(`not a control field: ${line}`);
    fields.push([m[1], m[2]]);
  }
  return fields;
}

export function debPackage(fields: Array<[string, string]>): DebPackage {
  const get = (k: string) => fields.find(([f]) => f.toLowerCase() === k.toLowerCase())?.[1];
  const name = get('Package');
  const version = get('Version');
  const architecture = get('Architecture');
  if (!name || !version || !architecture)
    throw new Error(`a control paragraph without Package, Version or Architecture: ${JSON.stringify(fields.slice(0, 3))}`);
  // "Source: name (version)" when the binary's version differs from its source's.
  const src = /^(\S+)(?:\s+\(([^)]+)\))?$/.exec(get('Source') ?? '');
  return { name, version, architecture, source: src?.[1] ?? name, sourceVersion: src?.[2] ?? version, fields };
}

/** /var/lib/dpkg/status for packages unpacked as they are: every one "install ok installed", sorted by name. */
export function dpkgStatus(packages: DebPackage[]): string {
  return [...packages]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((p) => {
      const lines: string[] = [];
      for (const [k, v] of p.fields) {
        lines.push(`${k}: ${v}`);
        if (k === 'Package') lines.push('Status: install ok installed');
      }
      return `${lines.join('\n')}\n`;
    })
    .join('\n');
}

/** The package URL (purl) of a Debian binary package. */
export function debPurl(p: DebPackage, distro: string): string {
  const enc = encodeURIComponent;
  const q = [`arch=${enc(p.architecture)}`, `distro=${enc(distro)}`];
  if (p.source !== p.name || p.sourceVersion !== p.version) q.push(`upstream=${enc(`${p.source}@${p.sourceVersion}`)}`);
  return `pkg:deb/debian/${enc(p.name)}@${enc(p.version)}?${q.join('&')}`;
}
