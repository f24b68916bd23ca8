const pageOptions: Record<string, string> = {};
const showDialog = jest.fn();
const notify = { error: jest.fn(), success: jest.fn() };
jest.mock('@jupyterlab/apputils', () => ({
  Dialog: {
    cancelButton: (options: object) => ({ ...options, accept: false }),
    warnButton: (options: object) => ({ ...options, accept: true })
  },
  Notification: notify,
  showDialog: (options: unknown) => showDialog(options)
}));
jest.mock('@jupyterlab/coreutils', () => ({
  PageConfig: {
    getOption: (name: string) => pageOptions[name] ?? '',
    getBaseUrl: () => '/user/alice/'
  },
  URLExt: {
    join: (...parts: string[]) => parts.join('/').replace(/\/{2,}/g, '/')
  }
}));
jest.mock('../handler', () => ({ requestAPI: jest.fn() }));

import { openTensorBoard, stopServer, usagePageUrl } from '../actions';
import { requestAPI } from '../handler';
import { en } from './helpers';

const request = requestAPI as jest.Mock;

describe('usagePageUrl', () => {
  afterEach(() => {
    delete pageOptions.hubPrefix;
    delete pageOptions.hubHost;
  });

  it("links the gpu service's pages next to the hub", () => {
    pageOptions.hubPrefix = '/jh/hub/';
    pageOptions.hubHost = 'https://gpu.example.edu';
    expect(usagePageUrl()).toBe('https://gpu.example.edu/jh/services/gpu/');
    pageOptions.hubPrefix = '/hub/';
    pageOptions.hubHost = '';
    expect(usagePageUrl()).toBe('/services/gpu/');
  });

  it('is absent outside JupyterHub', () => {
    expect(usagePageUrl()).toBeNull();
  });
});

describe('openTensorBoard', () => {
  it('opens the URL in a new tab, below the base URL when relative', () => {
    const open = jest.spyOn(window, 'open').mockImplementation(() => null);
    openTensorBoard('/user/alice/proxy/6006/');
    openTensorBoard('proxy/6006/');
    expect(open.mock.calls).toEqual([
      ['/user/alice/proxy/6006/', '_blank', 'noopener'],
      ['/user/alice/proxy/6006/', '_blank', 'noopener']
    ]);
    open.mockRestore();
  });
});

describe('stopServer', () => {
  beforeEach(() => {
    showDialog.mockReset();
    request.mockReset();
    notify.error.mockReset();
    notify.success.mockReset();
  });

  it('does nothing unless confirmed', async () => {
    showDialog.mockResolvedValue({ button: { accept: false } });
    expect(await stopServer(en)).toBe(false);
    expect(request).not.toHaveBeenCalled();
  });

  it('stops the server through the server extension once confirmed', async () => {
    showDialog.mockResolvedValue({ button: { accept: true } });
    request.mockResolvedValue({ data: null, serverTime: null });
    expect(await stopServer(en)).toBe(true);
    expect(request).toHaveBeenCalledWith('stop', { method: 'POST' });
    expect(notify.success).toHaveBeenCalledWith(
      'Your server is stopping. Billing stops now.',
      { autoClose: 5000 }
    );
    const dialog = showDialog.mock.calls[0][0];
    expect(dialog.title).toBe('Stop your server?');
    expect(dialog.buttons.map((b: { label: string }) => b.label)).toEqual([
      'Cancel',
      'Stop my server'
    ]);
  });

  it('says why when the server cannot be stopped', async () => {
    showDialog.mockResolvedValue({ button: { accept: true } });
    request.mockRejectedValue(new Error('Bad Gateway'));
    expect(await stopServer(en)).toBe(false);
    expect(notify.error).toHaveBeenCalledWith(
      'Could not stop your server: Bad Gateway',
      { autoClose: false }
    );
    expect(notify.success).not.toHaveBeenCalled();
  });
});
