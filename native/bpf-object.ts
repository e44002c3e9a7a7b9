/**
 * BpfObject: a compiled BPF ELF object opened and loaded with libbpf's object
 * API. With `pinMapsDir`, every map gets the pin path `${pinMapsDir}/${name}`
 * (or its own from `pinPaths`) before load, so libbpf reuses a compatible map
 * already pinned there (the agent adopts its maps across restarts) or pins
 * the new one. `reuseMaps` hands a map an existing map's fd instead.
 */
import fs from 'node:fs';
import path from 'node:path';
import { constants } from 'node:os';
import koffi from 'koffi';
import { libbpf, type NativePtr } from './libbpf.js';
import { KprBpfError, hintFor } from './errors.js';
import { BpfMap } from './bpf-map.js';
import { mapTypeName } from './map-info.js';
import { BpfProgram } from './bpf-program.js';
import { attachCgroup, type CgroupAttachment } from './attach.js';

const E = constants.errno;

export interface BpfObjectOpenOptions {
  /** bpffs directory (must exist, see ensureBpffs) where maps are pinned / adopted. */
  pinMapsDir?: string;
  /** Programs not to load (bpf_program__set_autoload false): their hook is missing from this kernel. */
  skipPrograms?: readonly string[];
  /**
   * max_entries by map name, set before load (bpf_map__set_max_entries) in
   * place of the compiled sizes; names of maps this object lacks are ignored
   * (the objects share one list). A pinned map is reused only at its size.
   */
  maxEntries?: Readonly<Record<string, number>>;
  /**
   * Pin path by map name, in place of `${pinMapsDir}/${name}`; null: the map
   * is not pinned. Names of maps this object lacks are ignored.
   */
  pinPaths?: Readonly<Record<string, string | null>>;
  /**
   * Maps that are an existing map (its fd: bpf_map__reuse_fd) instead of a
   * new one; never pinned. The kernel's definition replaces the object's, so
   * the programs are verified against the real map. Names of maps this
   * object lacks are ignored.
   */
  reuseMaps?: Readonly<Record<string, number>>;
}

export interface MapDef {
  name: string;
  type: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
}

export class BpfObject {
  readonly path: string;
  readonly name: string;
  readonly pinMapsDir?: string;
  #obj: NativePtr | null;
  /** Each map by the name it is declared with (libbpf renames a reused map after the map it reuses). */
  readonly #mapPtrs = new Map<string, NativePtr>();
  /** Pin path of each pinned map. */
  readonly #pinPaths = new Map<string, string>();
  #loaded = false;
  readonly #maps = new Map<string, BpfMap>();
  readonly #programs = new Map<string, BpfProgram>();

  private constructor(obj: NativePtr, objPath: string, pinMapsDir: string | undefined) {
    this.#obj = obj;
    this.path = objPath;
    this.name = libbpf().bpf_object__name(obj);
    if (pinMapsDir !== undefined) this.pinMapsDir = pinMapsDir;
  }

  /** bpf_object__open_file, plus the pin paths when `pinMapsDir` is given. */
  static open(objPath: string, opts: BpfObjectOpenOptions = {}): BpfObject {
    const lib = libbpf();
    const obj = lib.bpf_object__open_file(objPath, null);
    if (!obj) {
      const errno = koffi.errno() || E.EINVAL;
      throw new KprBpfError({ op: 'object open', path: objPath, errno, detail: hintFor(errno) });
    }
    const self = new BpfObject(obj, objPath, opts.pinMapsDir);
    try {
      for (let m = lib.bpf_object__next_map(obj, null); m; m = lib.bpf_object__next_map(obj, m)) self.#mapPtrs.set(lib.bpf_map__name(m), m);
      const reuse = opts.reuseMaps ?? {};
      for (const name of self.#mapPtrs.keys()) {
        if (name in reuse) continue;
        const given = opts.pinPaths?.[name];
        const pin = given !== undefined ? given : opts.pinMapsDir !== undefined ? path.join(opts.pinMapsDir, name) : null;
        if (pin === null) continue;
        const ret = lib.bpf_map__set_pin_path(self.#mapPtrs.get(name)!, pin);
        if (ret < 0) throw new KprBpfError({ op: 'map set pin path', map: name, errno: -ret });
        self.#pinPaths.set(name, pin);
      }
      for (const [name, entries] of Object.entries(opts.maxEntries ?? {})) {
        const map = self.#mapPtrs.get(name);
        if (!map || name in reuse) continue;
        const ret = lib.bpf_map__set_max_entries(map, entries);
        if (ret < 0) throw new KprBpfError({ op: 'map set max_entries', map: name, errno: -ret, detail: `max_entries ${entries}` });
      }
      for (const [name, fd] of Object.entries(reuse)) {
        const map = self.#mapPtrs.get(name);
        if (!map) continue;
        const ret = lib.bpf_map__reuse_fd(map, fd);
        if (ret < 0) throw new KprBpfError({ op: 'map reuse fd', map: name, errno: -ret, detail: `fd ${fd}` });
      }
      for (const name of opts.skipPrograms ?? []) {
        const prog = lib.bpf_object__find_program_by_name(obj, name);
        if (!prog) throw new KprBpfError({ op: 'object program', map: name, errno: E.ENOENT, detail: `no program ${name} in ${objPath}` });
        const ret = lib.bpf_program__set_autoload(prog, false);
        if (ret < 0) throw new KprBpfError({ op: 'program set autoload', map: name, errno: -ret });
      }
    } catch (err) {
      self.close();
      throw err;
    }
    return self;
  }

  get loaded(): boolean {
    return this.#loaded;
  }

  get closed(): boolean {
    return this.#obj === null;
  }

  /** Where map `name` is (or will be) pinned. Throws for a map that is not pinned. */
  pinPathOf(name: string): string {
    const pin = this.#pinPaths.get(name);
    if (pin === undefined) throw new Error(`bpf object ${this.path}: map ${name} is not pinned`);
    return pin;
  }

  mapNames(): string[] {
    return this.#mapDefs().map((d) => d.name);
  }

  /** Each map's definition as it will be created (max_entries as set): type, key and value sizes, flags. */
  mapDefs(): MapDef[] {
    return this.#mapDefs();
  }

  programNames(): string[] {
    const lib = libbpf();
    const obj = this.#live('object programs');
    const names: string[] = [];
    for (let p = lib.bpf_object__next_program(obj, null); p; p = lib.bpf_object__next_program(obj, p)) {
      names.push(lib.bpf_program__name(p));
    }
    return names;
  }

  /**
   * bpf_object__load: creates (or adopts pinned) maps, loads the programs.
   * On failure the object is closed (libbpf already unpinned what it pinned
   * during this load) and the error names an incompatible pinned map if any.
   */
  load(): void {
    const obj = this.#live('object load');
    if (this.#loaded) throw new KprBpfError({ op: 'object load', path: this.path, errno: E.EALREADY, detail: 'already loaded' });
    const defs = this.#mapDefs();
    const ret = libbpf().bpf_object__load(obj);
    if (ret < 0) {
      const errno = -ret;
      const bad = this.#findIncompatiblePin(defs);
      this.close();
      if (bad) {
        throw new KprBpfError({
          op: 'object load',
          map: bad.name,
          errno,
          detail: `pinned map ${bad.pin} is incompatible with ${this.path} (${bad.why}); remove the pin to recreate the map`,
        });
      }
      throw new KprBpfError({ op: 'object load', path: this.path, errno, detail: hintFor(errno) });
    }
    this.#loaded = true;
  }

  /** The loaded map `name`. The handle belongs to this object (closed with it). */
  map(name: string): BpfMap {
    const cached = this.#maps.get(name);
    if (cached) return cached;
    const lib = libbpf();
    this.#live('object map');
    const m = this.#mapPtrs.get(name);
    if (!m) throw new KprBpfError({ op: 'object map', map: name, errno: E.ENOENT, detail: `no map ${name} in ${this.path}` });
    if (!this.#loaded) throw new KprBpfError({ op: 'object map', map: name, errno: E.EINVAL, detail: 'object is not loaded' });
    const fd = lib.bpf_map__fd(m);
    if (fd < 0) throw new KprBpfError({ op: 'map fd', map: name, errno: -fd });
    const map = new BpfMap(fd, false, { name });
    this.#maps.set(name, map);
    return map;
  }

  /** The program `name` (attachable once loaded). Belongs to this object. */
  program(name: string): BpfProgram {
    const cached = this.#programs.get(name);
    if (cached) return cached;
    const p = libbpf().bpf_object__find_program_by_name(this.#live('object program'), name);
    if (!p) throw new KprBpfError({ op: 'object program', map: name, errno: E.ENOENT, detail: `no program ${name} in ${this.path}` });
    const prog = new BpfProgram(p);
    this.#programs.set(name, prog);
    return prog;
  }

  /** See attach.ts attachCgroup: pinned link, swapped in place when it exists. */
  attachCgroup(programName: string, cgroupPath: string, linkPinPath: string): CgroupAttachment {
    if (!this.#loaded) throw new KprBpfError({ op: 'attach cgroup', map: programName, errno: E.EINVAL, detail: 'object is not loaded' });
    return attachCgroup(this.program(programName), cgroupPath, linkPinPath);
  }

  /** bpf_object__close. Map/program handles from this object become invalid; pins and pinned links stay. */
  close(): void {
    const obj = this.#obj;
    if (!obj) return;
    this.#obj = null;
    for (const m of this.#maps.values()) m._invalidate();
    for (const p of this.#programs.values()) p._invalidate();
    this.#maps.clear();
    this.#programs.clear();
    this.#mapPtrs.clear();
    libbpf().bpf_object__close(obj);
  }

  #live(op: string): NativePtr {
    if (!this.#obj) throw new KprBpfError({ op, path: this.path, errno: E.EBADF, detail: 'object is closed' });
    return this.#obj;
  }

  #mapDefs(): MapDef[] {
    const lib = libbpf();
    this.#live('object maps');
    const defs: MapDef[] = [];
    for (const [name, m] of this.#mapPtrs) {
      defs.push({
        name,
        type: lib.bpf_map__type(m),
        keySize: lib.bpf_map__key_size(m),
        valueSize: lib.bpf_map__value_size(m),
        maxEntries: lib.bpf_map__max_entries(m),
        flags: lib.bpf_map__map_flags(m),
      });
    }
    return defs;
  }

  /**
   * Before load: the pinned maps that load would refuse to adopt (another
   * type, key/value size, max_entries or flags, or not a map), with why.
   */
  incompatiblePins(): Array<{ name: string; pin: string; why: string }> {
    const out: Array<{ name: string; pin: string; why: string }> = [];
    for (const def of this.#mapDefs()) {
      const bad = this.#findIncompatiblePin([def]);
      if (bad) out.push(bad);
    }
    return out;
  }

  /** After a failed load: the first pinned map that does not match its definition. */
  #findIncompatiblePin(defs: MapDef[]): { name: string; pin: string; why: string } | null {
    for (const def of defs) {
      const pin = this.#pinPaths.get(def.name);
      if (pin === undefined || !fs.existsSync(pin)) continue;
      let pinned: BpfMap;
      try {
        pinned = BpfMap.openPinned(pin);
      } catch (err) {
        return { name: def.name, pin, why: (err as Error).message };
      }
      try {
        const diffs: string[] = [];
        if (pinned.type !== def.type) diffs.push(`type ${pinned.typeName} != ${mapTypeName(def.type)}`);
        if (pinned.keySize !== def.keySize) diffs.push(`key_size ${pinned.keySize} != ${def.keySize}`);
        if (pinned.valueSize !== def.valueSize) diffs.push(`value_size ${pinned.valueSize} != ${def.valueSize}`);
        if (pinned.maxEntries !== def.maxEntries) diffs.push(`max_entries ${pinned.maxEntries} != ${def.maxEntries}`);
        if (pinned.flags !== def.flags) diffs.push(`map_flags ${pinned.flags} != ${def.flags}`);
        if (diffs.length) return { name: def.name, pin, why: diffs.join(', ') };
      } finally {
        pinned.close();
      }
    }
    return null;
  }
}
