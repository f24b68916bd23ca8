/**
 * The one way this extension talks to its server extension: `requestAPI`.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** Where the server extension's API lives, below the server's base URL. */
export const API_PREFIX = 'gpu/api/v1';

/** A parsed answer and the server's clock when it sent it. */
export interface IAPIResult<T> {
  data: T;
  /**
   * The server's time (ms since the epoch) from the `Date` header, or null without one.
   * Ages of server timestamps are measured against it so a wrong client clock does not matter.
   */
  serverTime: number | null;
}

/**
 * Call the server extension's REST API.
 *
 * @param endPoint the path below `gpu/api/v1`, e.g. `stats` or `notices/3/dismiss`
 * @param init the fetch options (method, body)
 * @param settings the server connection settings (the page's own by default)
 * @returns the JSON body (null when empty) and the server's clock
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<IAPIResult<T>> {
  const url = URLExt.join(settings.baseUrl, API_PREFIX, endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }

  const text = await response.text();
  let data: any = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!response.ok) {
    // JSON errors carry a message; an HTML error page is no message for a status bar
    const message =
      data && typeof data === 'object' && typeof data.message === 'string'
        ? data.message
        : typeof data === 'string' && data && !data.trimStart().startsWith('<')
          ? data.slice(0, 200)
          : undefined;
    throw new ServerConnection.ResponseError(response, message);
  }

  const date = response.headers.get('Date');
  const serverTime = date ? Date.parse(date) : NaN;
  return {
    data: data as T,
    serverTime: Number.isFinite(serverTime) ? serverTime : null
  };
}
