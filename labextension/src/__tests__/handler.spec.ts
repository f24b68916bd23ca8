// @jupyterlab/services and coreutils are ES modules; small stand-ins keep the test on requestAPI itself.
jest.mock('@jupyterlab/coreutils', () => ({
  URLExt: {
    join: (...parts: string[]) =>
      parts
        .filter(Boolean)
        .join('/')
        .replace(/([^:])\/{2,}/g, '$1/')
  }
}));
jest.mock('@jupyterlab/services', () => {
  class ResponseError extends Error {
    constructor(
      public response: { status: number; statusText: string },
      message = `Invalid response: ${response.status} ${response.statusText}`
    ) {
      super(message);
    }
  }
  class NetworkError extends TypeError {}
  return {
    ServerConnection: {
      makeSettings: () => ({ baseUrl: '/user/alice/' }),
      makeRequest: jest.fn(),
      ResponseError,
      NetworkError
    }
  };
});

import { ServerConnection } from '@jupyterlab/services';

import { requestAPI } from '../handler';

const makeRequest = ServerConnection.makeRequest as jest.Mock;

/** A minimal fetch Response. */
function response(
  status: number,
  body: string,
  headers: Record<string, string> = {}
) {
  return {
    ok: status >= 200 && status < 300,
    status,
    statusText: status === 200 ? 'OK' : 'Error',
    text: async () => body,
    headers: { get: (name: string) => headers[name] ?? null }
  };
}

describe('requestAPI', () => {
  beforeEach(() => makeRequest.mockReset());

  it('calls gpu/api/v1 below the base URL and returns the JSON and the server clock', async () => {
    makeRequest.mockResolvedValue(
      response(200, '{"simulated": true}', {
        Date: 'Sun, 29 Nov 2026 20:00:05 GMT'
      })
    );
    const result = await requestAPI<{ simulated: boolean }>('stats');
    expect(makeRequest.mock.calls[0][0]).toBe('/user/alice/gpu/api/v1/stats');
    expect(result.data).toEqual({ simulated: true });
    expect(result.serverTime).toBe(Date.parse('2026-11-29T20:00:05Z'));
  });

  it('passes the method on and accepts an empty body', async () => {
    makeRequest.mockResolvedValue(response(202, ''));
    const result = await requestAPI('stop', { method: 'POST' });
    expect(makeRequest.mock.calls[0][1]).toEqual({ method: 'POST' });
    expect(result).toEqual({ data: null, serverTime: null });
  });

  it("raises the server's message, but not an HTML error page", async () => {
    makeRequest.mockResolvedValue(
      response(404, '{"message": "No gpu service"}')
    );
    await expect(requestAPI('notices/3/dismiss')).rejects.toThrow(
      'No gpu service'
    );
    makeRequest.mockResolvedValue(
      response(404, '<html><body>404</body></html>')
    );
    await expect(requestAPI('stats')).rejects.toThrow(
      'Invalid response: 404 Error'
    );
  });

  it('turns a failed fetch into a network error', async () => {
    makeRequest.mockRejectedValue(new TypeError('Failed to fetch'));
    await expect(requestAPI('stats')).rejects.toBeInstanceOf(
      ServerConnection.NetworkError
    );
  });
});
