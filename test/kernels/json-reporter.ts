/**
 * A node:test reporter that writes one JSON line per finished test (and per
 * suite), so the kernel matrix can count results without parsing the spec
 * reporter's text. Used as --test-reporter=dist/test/kernels/json-reporter.js.
 */
interface TestEventData {
  name: string;
  nesting: number;
  file?: string;
  details?: { duration_ms?: number; type?: string; error?: { message?: string; cause?: unknown } };
  skip?: boolean | string;
  todo?: boolean | string;
}

export interface TestRecord {
  file: string;
  name: string;
  nesting: number;
  suite: boolean;
  status: 'pass' | 'fail' | 'skip';
  ms: number;
  error?: string;
  /** A skip whose reason starts "n/a" (an upstream test the conformance list marks not applicable): the same on every kernel. */
  notApplicable?: boolean;
}

function errorText(err: { message?: string; cause?: unknown } | undefined): string | undefined {
  if (!err) return undefined;
  const cause = err.cause instanceof Error ? err.cause.message : typeof err.cause === 'string' ? err.cause : undefined;
  return (cause ?? err.message ?? String(err)).slice(0, 2000);
}

/**
 * node:test names as a test's file the module that called test(): for a
 * test a shared helper registers (the conformance suites' registerUpstream
 * in harness.js) that is the helper, not the suite. Each test file's tests
 * finish before its top-level test or suite (nesting 0, called from the file
 * itself), and the files run one at a time (--test-concurrency=1), so the
 * records wait for the next top-level one and take its file.
 */
export default async function* jsonReporter(source: AsyncIterable<{ type: string; data: TestEventData }>): AsyncGenerator<string> {
  let pending: TestRecord[] = [];
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const d = event.data;
    const rec: TestRecord = {
      file: d.file ?? '',
      name: d.name,
      nesting: d.nesting,
      suite: d.details?.type === 'suite',
      status: event.type === 'test:fail' ? 'fail' : d.skip || d.todo ? 'skip' : 'pass',
      ms: d.details?.duration_ms ?? 0,
    };
    if (event.type === 'test:fail') rec.error = errorText(d.details?.error);
    if (rec.status === 'skip' && typeof d.skip === 'string' && d.skip.startsWith('n/a')) rec.notApplicable = true;
    if (rec.nesting > 0) {
      pending.push(rec);
      continue;
    }
    for (const p of pending) yield JSON.stringify({ ...p, file: rec.file || p.file }) + '\n';
    pending = [];
    yield JSON.stringify(rec) + '\n';
  }
  for (const p of pending) yield JSON.stringify(p) + '\n';
}
