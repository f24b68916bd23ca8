const pageOptions: Record<string, string> = {};
jest.mock('@jupyterlab/coreutils', () => ({
  PageConfig: { getOption: (name: string) => pageOptions[name] ?? '' },
  URLExt: {
    join: (...parts: string[]) => parts.join('/').replace(/\/{2,}/g, '/')
  }
}));
jest.mock('../handler', () => ({ requestAPI: jest.fn() }));

import {
  biggerSlug,
  openNotebooks,
  REOPEN_KEY,
  restartOnBigger,
  spawnPendingUrl,
  takeReopen
} from '../bigger';
import { requestAPI } from '../handler';

const request = requestAPI as jest.Mock;

beforeEach(() => {
  window.localStorage.clear();
  request.mockReset();
  Object.assign(pageOptions, {
    hubPrefix: '/hub/',
    hubHost: '',
    hubUser: 'stu1',
    hubServerName: ''
  });
});

describe('biggerSlug', () => {
  it('reads the slug of a bigger:<slug> notice, and nothing of another kind', () => {
    expect(biggerSlug('bigger:a100')).toBe('a100');
    expect(biggerSlug('bigger:t4x2')).toBe('t4x2');
    expect(biggerSlug('advice')).toBeNull();
    expect(biggerSlug('bigger:')).toBeNull();
    expect(biggerSlug('bigger:../../x')).toBeNull();
    expect(biggerSlug(undefined)).toBeNull();
  });
});

describe('spawnPendingUrl', () => {
  it("is the hub's spawn-pending page of this server", () => {
    expect(spawnPendingUrl()).toBe('/hub/spawn-pending/stu1');
    Object.assign(pageOptions, {
      hubPrefix: '/jh/hub/',
      hubHost: 'https://gpu.example.edu',
      hubUser: 'li wei',
      hubServerName: 'big one'
    });
    expect(spawnPendingUrl()).toBe(
      'https://gpu.example.edu/jh/hub/spawn-pending/li%20wei/big%20one'
    );
  });
});

describe('openNotebooks', () => {
  it('lists the open notebooks once each, and no other document', () => {
    const widgets = [
      { context: { path: 'work/a.ipynb' } },
      { context: { path: 'notes.md' } },
      { title: 'launcher' },
      { context: { path: 'work/a.ipynb' } },
      { context: { path: 'b.ipynb' } }
    ];
    const app = {
      shell: { widgets: (area?: string) => (area === 'main' ? widgets : []) }
    };
    expect(openNotebooks(app)).toEqual(['work/a.ipynb', 'b.ipynb']);
  });
});

describe('restartOnBigger', () => {
  it('saves, keeps the open notebooks, asks for the profile, waits for the server to go, then opens the spawn page', async () => {
    const order: string[] = [];
    const save = jest.fn(async () => order.push('save'));
    request.mockImplementation(async (path: string, init: RequestInit) => {
      order.push(`${path} ${init.body}`);
      // the notebooks are kept before the restart is asked for
      expect(JSON.parse(window.localStorage.getItem(REOPEN_KEY)!)).toEqual([
        'a.ipynb'
      ]);
      return { profile: 'a100' };
    });
    let looks = 0;
    const alive = jest.fn(async () => ++looks < 3);
    const go = jest.fn();
    await restartOnBigger('a100', {
      save,
      openPaths: () => ['a.ipynb'],
      alive,
      go,
      pollMs: 1
    });
    expect(order).toEqual(['save', 'restart-bigger {"profile":"a100"}']);
    expect(alive).toHaveBeenCalledTimes(3);
    expect(go).toHaveBeenCalledWith('/hub/spawn-pending/stu1');
    // the Lab that loads next reopens them, once
    expect(takeReopen()).toEqual(['a.ipynb']);
    expect(takeReopen()).toEqual([]);
  });

  it('keeps nothing and goes nowhere when the service refuses', async () => {
    request.mockRejectedValue(
      new Error("profile must be 'a100', the next bigger profile open to you")
    );
    const go = jest.fn();
    await expect(
      restartOnBigger('cpu', {
        save: async () => undefined,
        openPaths: () => ['a.ipynb'],
        go
      })
    ).rejects.toThrow("profile must be 'a100'");
    expect(window.localStorage.getItem(REOPEN_KEY)).toBeNull();
    expect(go).not.toHaveBeenCalled();
  });
});

describe('takeReopen', () => {
  it('ignores what is not a list of paths', () => {
    window.localStorage.setItem(REOPEN_KEY, '{not json');
    expect(takeReopen()).toEqual([]);
    window.localStorage.setItem(
      REOPEN_KEY,
      JSON.stringify(['a.ipynb', 3, '', null])
    );
    expect(takeReopen()).toEqual(['a.ipynb']);
    expect(window.localStorage.getItem(REOPEN_KEY)).toBeNull();
  });
});
