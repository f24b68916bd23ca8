// The real Notification API lives in an ES module that jest does not load; a small
// stand-in records what would be shown and lets the test dismiss notifications.
jest.mock('@jupyterlab/apputils', () => {
  const { Signal } = jest.requireActual('@lumino/signaling');
  const manager: any = { notifications: [] as any[] };
  manager.changed = new Signal(manager);
  let next = 0;
  const Notification = {
    manager,
    emit: jest.fn((message: string, type: string, options: any) => {
      const notification = { id: `n${++next}`, message, type, options };
      manager.notifications.push(notification);
      manager.changed.emit({ type: 'added', notification });
      return notification.id;
    }),
    error: jest.fn(),
    dismiss: (id: string) => {
      const notification = manager.notifications.find((n: any) => n.id === id);
      manager.notifications = manager.notifications.filter(
        (n: any) => n.id !== id
      );
      manager.changed.emit({ type: 'removed', notification });
    }
  };
  return { Notification };
});
jest.mock('../handler', () => ({ requestAPI: jest.fn() }));

import { Notification } from '@jupyterlab/apputils';

import {
  MAX_REMEMBERED,
  NoticeCenter,
  notificationType,
  SeenNotices,
  STATE_KEY
} from '../notices';
import type { INotice } from '../types';
import { en } from './helpers';

const notice = (id: number, level = 'warning'): INotice => ({
  id,
  kind: 'budget',
  level,
  message: `notice ${id}`,
  created: '2026-11-29T20:00:00Z'
});

/** An in-memory stand-in for JupyterLab's state database. */
class MemoryState {
  data = new Map<string, unknown>();
  fetch = jest.fn(async (key: string) => this.data.get(key));
  save = jest.fn(async (key: string, value: unknown) => {
    this.data.set(key, value);
  });
}

const emit = Notification.emit as jest.Mock;

beforeEach(() => {
  emit.mockClear();
  (Notification.manager as any).notifications = [];
});

describe('SeenNotices', () => {
  it('returns each notice id once', () => {
    const seen = new SeenNotices();
    expect(seen.take([notice(1), notice(2), notice(1)]).map(n => n.id)).toEqual(
      [1, 2]
    );
    expect(seen.take([notice(2), notice(3)]).map(n => n.id)).toEqual([3]);
    expect(seen.take([notice(1), notice(2), notice(3)])).toEqual([]);
  });

  it('starts from the ids remembered before', () => {
    const seen = new SeenNotices([1, 2]);
    expect(seen.take([notice(1), notice(4)]).map(n => n.id)).toEqual([4]);
    expect(seen.toJSON()).toEqual([1, 2, 4]);
  });

  it('remembers only the newest ids', () => {
    const seen = new SeenNotices();
    seen.take(Array.from({ length: MAX_REMEMBERED + 5 }, (_, i) => notice(i)));
    expect(seen.toJSON()).toHaveLength(MAX_REMEMBERED);
    expect(seen.has(0)).toBe(false);
    expect(seen.has(MAX_REMEMBERED + 4)).toBe(true);
  });

  it('ignores notices without an integer id', () => {
    expect(new SeenNotices().take([{ ...notice(1), id: 'x' as any }])).toEqual(
      []
    );
  });
});

describe('notificationType', () => {
  it('maps levels to notification types', () => {
    expect(notificationType('warning')).toBe('warning');
    expect(notificationType('error')).toBe('error');
    expect(notificationType('critical')).toBe('error');
    expect(notificationType('info')).toBe('info');
    expect(notificationType('whatever')).toBe('info');
  });
});

describe('NoticeCenter', () => {
  it('shows each notice once across polls, with the level as type', async () => {
    const center = new NoticeCenter({
      localizer: () => en,
      dismiss: jest.fn()
    });
    await center.update([notice(3), notice(4, 'info')]);
    await center.update([notice(3), notice(4, 'info')]);
    await center.update([notice(3), notice(4, 'info'), notice(5, 'error')]);
    expect(emit.mock.calls.map(call => [call[0], call[1]])).toEqual([
      ['notice 3', 'warning'],
      ['notice 4', 'info'],
      ['notice 5', 'error']
    ]);
    // warnings stay until closed; info notices close by themselves
    expect(emit.mock.calls[0][2].autoClose).toBe(false);
    expect(emit.mock.calls[1][2].autoClose).toBeGreaterThan(0);
    center.dispose();
  });

  it('does not show again after a reload what the state database remembers', async () => {
    const state = new MemoryState();
    const first = new NoticeCenter({
      localizer: () => en,
      state: state as any,
      dismiss: jest.fn()
    });
    await first.update([notice(7)]);
    first.dispose();
    expect(state.data.get(STATE_KEY)).toEqual({ shown: [7] });

    const second = new NoticeCenter({
      localizer: () => en,
      state: state as any,
      dismiss: jest.fn()
    });
    await second.update([notice(7), notice(8)]);
    expect(emit.mock.calls.map(call => call[0])).toEqual([
      'notice 7',
      'notice 8'
    ]);
    second.dispose();
  });

  it('dismisses the notice on the server when the student dismisses it', async () => {
    const dismiss = jest.fn(async () => undefined);
    const center = new NoticeCenter({ localizer: () => en, dismiss });
    await center.update([notice(9), notice(10)]);
    const ids = emit.mock.results.map(result => result.value as string);
    Notification.dismiss(ids[1]);
    expect(dismiss).toHaveBeenCalledTimes(1);
    expect(dismiss).toHaveBeenCalledWith(10);
    // other notifications (not ours) are none of its business
    (Notification.manager.changed as any).emit({
      type: 'removed',
      notification: { id: 'other' }
    });
    expect(dismiss).toHaveBeenCalledTimes(1);
    center.dispose();
  });

  it('offers a "Show usage" action when it can open the panel', async () => {
    const showPanel = jest.fn();
    const center = new NoticeCenter({
      localizer: () => en,
      showPanel,
      dismiss: jest.fn()
    });
    await center.update([notice(11)]);
    const actions = emit.mock.calls[0][2].actions;
    expect(actions.map((a: any) => a.label)).toEqual(['Show usage', 'Dismiss']);
    const event = { preventDefault: jest.fn() };
    actions[0].callback(event);
    expect(showPanel).toHaveBeenCalled();
    // opening the panel keeps the notification (and the notice) in place
    expect(event.preventDefault).toHaveBeenCalled();
    center.dispose();
  });

  it('offers "Restart on the bigger profile" on a bigger:<slug> notice, and reports a refusal', async () => {
    const restartBigger = jest.fn(async () => {
      throw new Error('Your budget cannot pay for a100');
    });
    const center = new NoticeCenter({
      localizer: () => en,
      restartBigger,
      dismiss: jest.fn()
    });
    await center.update([
      { ...notice(21, 'info'), kind: 'bigger:a100' },
      notice(22)
    ]);
    const [first, second] = emit.mock.calls.map(call => call[2].actions);
    expect(first.map((a: any) => a.label)).toEqual([
      'Restart on the bigger profile',
      'Dismiss'
    ]);
    // a notice of another kind has no such button
    expect(second.map((a: any) => a.label)).toEqual(['Dismiss']);
    const event = { preventDefault: jest.fn() };
    first[0].callback(event);
    expect(restartBigger).toHaveBeenCalledWith('a100');
    expect(event.preventDefault).toHaveBeenCalled();
    await Promise.resolve();
    await Promise.resolve();
    expect((Notification as any).error).toHaveBeenCalledWith(
      'Could not restart on the bigger profile: Your budget cannot pay for a100',
      { autoClose: false }
    );
    center.dispose();
  });
});
