jest.mock('../handler', () => ({ requestAPI: jest.fn() }));

import {
  type IStopWhenDone,
  type IStopWhenDoneAPI,
  StopWhenDoneModel,
  StopWhenDoneToggle,
  stopWhenDoneText
} from '../stopwhendone';
import { en, zh } from './helpers';

function state(overrides: Partial<IStopWhenDone> = {}): IStopWhenDone {
  return {
    state: 'off',
    flagged_at: null,
    run_seen: false,
    busy_kernels: 0,
    deadline: null,
    ...overrides
  };
}

function fakeAPI(answers: IStopWhenDone[]): jest.Mocked<IStopWhenDoneAPI> {
  return {
    get: jest.fn(async () => answers.shift() ?? state()),
    set: jest.fn(async (enabled: boolean) =>
      state({ state: enabled ? 'armed' : 'off', busy_kernels: 1 })
    ),
    saved: jest.fn(async () => state({ state: 'stopping' }))
  };
}

describe('StopWhenDoneModel', () => {
  it('sets and clears the flag on the server', async () => {
    const api = fakeAPI([]);
    const model = new StopWhenDoneModel({ api, save: jest.fn() });
    const changes = jest.fn();
    model.changed.connect(changes);
    await model.toggle();
    expect(api.set).toHaveBeenLastCalledWith(true);
    expect(model.enabled).toBe(true);
    await model.toggle();
    expect(api.set).toHaveBeenLastCalledWith(false);
    expect(model.enabled).toBe(false);
    expect(changes).toHaveBeenCalledTimes(2);
    model.dispose();
  });

  it('saves the open notebooks once when the run is over, then lets the server stop', async () => {
    const api = fakeAPI([
      state({ state: 'armed', busy_kernels: 1, run_seen: true }),
      state({ state: 'saving', run_seen: true }),
      state({ state: 'saving', run_seen: true })
    ]);
    const save = jest.fn(async () => undefined);
    const model = new StopWhenDoneModel({ api, save });
    await model.refresh();
    expect(save).not.toHaveBeenCalled();
    await model.refresh();
    expect(save).toHaveBeenCalledTimes(1);
    expect(api.saved).toHaveBeenCalledTimes(1);
    expect(model.state?.state).toBe('stopping');
    await model.refresh(); // saving again: not saved twice
    expect(save).toHaveBeenCalledTimes(1);
    model.dispose();
  });

  it('stops polling for good once the hub says the server is gone (424)', async () => {
    const gone = Object.assign(new Error('server not running'), {
      response: { status: 424 }
    });
    const api = fakeAPI([]);
    api.get.mockRejectedValue(gone);
    const model = new StopWhenDoneModel({ api, save: jest.fn(), interval: 5 });
    const changes = jest.fn();
    model.changed.connect(changes);
    await model.set(true); // the flag is set: the poll runs even in a hidden tab
    await new Promise(resolve => setTimeout(resolve, 300));
    expect(api.get).toHaveBeenCalledTimes(1);
    expect(model.ended).toBe(true);
    expect(model.state?.state).toBe('stopping'); // the status bar says billing stopped
    await model.refresh(); // asks nothing either
    expect(api.get).toHaveBeenCalledTimes(1);
    expect(changes).toHaveBeenCalled();
    model.dispose();
  });

  it('keeps polling, backing off, after other failures', async () => {
    const api = fakeAPI([]);
    api.get.mockRejectedValue(new Error('Bad Gateway'));
    const model = new StopWhenDoneModel({ api, save: jest.fn(), interval: 5 });
    await model.set(true);
    await new Promise(resolve => setTimeout(resolve, 300));
    expect(model.ended).toBe(false);
    const calls = api.get.mock.calls.length;
    expect(calls).toBeGreaterThan(2);
    expect(calls).toBeLessThan(30); // backing off: not one every 5 ms
    model.dispose();
  });

  it('still tells the server to stop when saving fails', async () => {
    const api = fakeAPI([state({ state: 'saving' })]);
    const model = new StopWhenDoneModel({
      api,
      save: jest.fn(async () => {
        throw new Error('disk full');
      })
    });
    await expect(model.refresh()).rejects.toThrow('disk full');
    expect(api.saved).toHaveBeenCalledTimes(1);
    model.dispose();
  });
});

describe('stopWhenDoneText', () => {
  it('says what the flag waits for, in English and Chinese', () => {
    expect(stopWhenDoneText(state(), en)).toBe('');
    expect(stopWhenDoneText(null, en)).toBe('');
    expect(
      stopWhenDoneText(state({ state: 'armed', busy_kernels: 1 }), en)
    ).toBe('Stops when the running cells finish');
    expect(stopWhenDoneText(state({ state: 'armed' }), en)).toBe(
      'Stops after the next run finishes'
    );
    expect(stopWhenDoneText(state({ state: 'saving' }), zh)).toBe(
      '运行已结束：正在保存笔记本，随后停止'
    );
  });
});

describe('StopWhenDoneToggle', () => {
  it('is a checkbox that follows the flag; the status bar form shows only while set', async () => {
    const api = fakeAPI([]);
    const model = new StopWhenDoneModel({ api, save: jest.fn() });
    const full = new StopWhenDoneToggle({ model, localizer: () => en });
    const compact = new StopWhenDoneToggle({
      model,
      localizer: () => en,
      compact: true
    });
    const box = full.node.querySelector('input') as HTMLInputElement;
    expect(full.node.textContent).toContain(
      'Stop this server when the running cells finish'
    );
    expect(box.checked).toBe(false);
    expect(compact.node.hidden).toBe(true);

    box.checked = true;
    box.dispatchEvent(new Event('change'));
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(api.set).toHaveBeenCalledWith(true);
    expect(compact.node.hidden).toBe(false);
    expect(compact.node.textContent).toBe(
      'Stops when the running cells finish'
    );
    full.dispose();
    compact.dispose();
    model.dispose();
  });
});
