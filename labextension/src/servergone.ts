/**
 * How a poll knows that this server is gone.
 *
 * JupyterHub answers 424 for a request to a server that is not running (any more). The session is
 * over (stopped by the user, the flag, the culler or the budget), so a poll that gets it stops: asking
 * again only fills the hub's log with `424 GET .../gpu/api/v1/...` warnings.
 */
import type { ServerConnection } from '@jupyterlab/services';

/** JupyterHub's status for a request to a server that is not running. */
export const SERVER_GONE_STATUS = 424;

/** Whether `error` (a failed `requestAPI`) says this server is not running any more. */
export function serverGone(error: unknown): boolean {
  const response = (error as ServerConnection.ResponseError | null)?.response;
  return (
    error instanceof Error &&
    !!response &&
    typeof response.status === 'number' &&
    response.status === SERVER_GONE_STATUS
  );
}
