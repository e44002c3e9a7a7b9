/** The part of madge's API (its CommonJS main, lib/api.js) that test/codebase/import-rules.test.ts uses; madge ships no types. */
declare module 'madge' {
  interface MadgeConfig {
    /** Graph keys are paths relative to this directory. */
    baseDir?: string;
    fileExtensions?: string[];
    /** A tsconfig.json path: module specifiers are resolved as tsc resolves them (./x.js → ./x.ts). */
    tsConfig?: string;
    /** Per file type: detective-typescript's skipTypeImports and skipAsyncImports (both false unless set). */
    detectiveOptions?: Record<string, Record<string, unknown>>;
  }
  interface MadgeResult {
    /** Each module → the modules it imports. */
    obj(): Record<string, string[]>;
    /** Each cycle, as the modules along it. */
    circular(): string[][];
    /** Imports madge could not resolve to a file. */
    warnings(): { skipped: string[] };
  }
  export default function madge(path: string | string[], config?: MadgeConfig): Promise<MadgeResult>;
}
