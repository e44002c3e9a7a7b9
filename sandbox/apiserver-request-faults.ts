/**
 * Fault injection on the sandbox API server's requests: the next N requests
 * whose "METHOD path?query" matches fail with a Status of a given code, as a
 * kube-apiserver that is overloaded (503) or failing (500) answers.
 */
import { ApiError } from './apiserver-status.js';

export class RequestFaults {
  private faults: { count: number; code: number; match?: RegExp } | undefined;

  /** The next `count` requests matching `match` (default: every request) fail with `code`; replaces what was armed before. */
  arm(count: number, code: number, match?: RegExp): void {
    this.faults = { count, code, match };
  }

  /** The failure due for the request `methodAndUrl` ("METHOD path?query"), counted off, or undefined. */
  take(methodAndUrl: string): ApiError | undefined {
    const faults = this.faults;
    if (!faults || faults.count <= 0 || (faults.match && !faults.match.test(methodAndUrl))) return undefined;
    faults.count--;
    return new ApiError(faults.code, faults.code === 503 ? 'ServiceUnavailable' : 'InternalError', 'injected failure');
  }
}
