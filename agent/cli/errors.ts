/**
 * How a kpr command ends other than with its output, and the exit status of
 * each (README, The CLI): a problem found while running (1), a usage error (2),
 * or a request for the command's usage (0, on stdout).
 */

/** The command ran and found a problem (nothing pinned, no permission, not found): exit 1, its message on stderr. */
export class CliError extends Error {}

/** The command line is wrong (an unknown command or flag, a missing or bad argument): exit 2. `command` names whose --help to see. */
export class UsageError extends CliError {
  constructor(
    message: string,
    readonly command?: string,
  ) {
    super(message);
  }
}

/** -h/--help: print `text` on stdout and exit 0. */
export class HelpRequest extends Error {
  constructor(readonly text: string) {
    super('help requested');
  }
}

export const EXIT_PROBLEM = 1;
export const EXIT_USAGE = 2;
