jest.mock('../handler', () => ({ requestAPI: jest.fn() }));

import { StatsModel } from '../model';
import { makeStats } from './helpers';

const sampledAt = Date.parse('2026-11-29T20:00:00Z');

describe('StatsModel', () => {
  it('keeps the answer and judges staleness on the server clock', async () => {
    const fetch = jest
      .fn()
      .mockResolvedValueOnce({
        data: makeStats(),
        serverTime: sampledAt + 1000
      })
      .mockResolvedValueOnce({
        data: makeStats(),
        serverTime: sampledAt + 60_000
      });
    const model = new StatsModel({ fetch, interval: 60_000, standby: 'never' });
    await model.refresh();
    expect(model.stats?.session?.cost).toBe('0.6');
    expect(model.stale).toBe(false);
    expect(model.error).toBeNull();

    await model.refresh();
    expect(model.stale).toBe(true);
    model.dispose();
  });

  it('keeps the last figures, marked stale, when a poll fails', async () => {
    const fetch = jest
      .fn()
      .mockResolvedValueOnce({ data: makeStats(), serverTime: sampledAt })
      .mockRejectedValueOnce(new Error('Bad Gateway'));
    const model = new StatsModel({ fetch, interval: 60_000, standby: 'never' });
    const changes = jest.fn();
    model.changed.connect(changes);
    await model.refresh();
    await model.refresh();
    expect(model.error).toBe('Bad Gateway');
    expect(model.stale).toBe(true);
    expect(model.stats).not.toBeNull();
    expect(changes).toHaveBeenCalled();
    model.dispose();
    expect(model.isDisposed).toBe(true);
  });

  it('stops polling for good once the hub says the server is gone (424)', async () => {
    const gone = Object.assign(new Error('server not running'), {
      response: { status: 424 }
    });
    const fetch = jest
      .fn()
      .mockResolvedValueOnce({ data: makeStats(), serverTime: sampledAt })
      .mockRejectedValue(gone);
    const model = new StatsModel({ fetch, interval: 5, standby: 'never' });
    await model.refresh();
    await new Promise(resolve => setTimeout(resolve, 300));
    expect(model.ended).toBe(true);
    const calls = fetch.mock.calls.length;
    expect(calls).toBeLessThanOrEqual(3); // the first tick, the refresh, the 424: then no more
    await model.refresh(); // a refresh asks nothing either
    await new Promise(resolve => setTimeout(resolve, 100));
    expect(fetch).toHaveBeenCalledTimes(calls);
    expect(model.stats).not.toBeNull(); // the last figures stay shown
    model.dispose();
  });

  it('keeps polling, backing off, after other failures', async () => {
    const fetch = jest.fn().mockRejectedValue(new Error('Bad Gateway'));
    const model = new StatsModel({ fetch, interval: 5, standby: 'never' });
    await new Promise(resolve => setTimeout(resolve, 300));
    expect(model.ended).toBe(false);
    expect(fetch.mock.calls.length).toBeGreaterThan(2);
    model.dispose();
  });

  it('never calls a server without GPUs stale for want of a sample', async () => {
    const stats = makeStats({ gpus: [], history: [], sampled_at: null });
    const fetch = jest
      .fn()
      .mockResolvedValue({ data: stats, serverTime: null });
    const model = new StatsModel({ fetch, interval: 60_000, standby: 'never' });
    await model.refresh();
    expect(model.stale).toBe(false);
    model.dispose();
  });

  it('changes its interval', () => {
    const model = new StatsModel({
      fetch: jest.fn(() => new Promise(() => undefined)),
      interval: 5000,
      standby: 'never'
    });
    model.interval = 2000;
    expect(model.interval).toBe(2000);
    model.dispose();
  });
});
