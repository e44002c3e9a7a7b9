/**
 * Errors as the sandbox API server answers them: a Kubernetes Status object
 * (the body of every failed request, and of a watch's ERROR event).
 */

export interface StatusObject {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, never>;
  status: 'Failure' | 'Success';
  message: string;
  reason: string;
  details?: { name?: string; group?: string; kind?: string; uid?: string };
  code: number;
}

/** An error that maps to a Kubernetes Status response. */
export class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: StatusObject['details'],
  ) {
    super(message);
  }
  toStatus(): StatusObject {
    return statusObject(this.code, this.reason, this.message, this.details);
  }
}

export function statusObject(code: number, reason: string, message: string, details?: StatusObject['details']): StatusObject {
  const s: StatusObject = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
  if (details) s.details = details;
  return s;
}
