/**
 * "Stop this server when the running cells finish": the flag, its status bar item and its
 * panel toggle.
 *
 * The server extension watches the kernels (`gpu/api/v1/stop-when-done`); this side sets
 * and clears the flag, shows it, and, when the server says the run is over (`saving`),
 * saves every open document and tells the server it may stop (`stop-when-done/saved`).
 */
import { Poll } from '@lumino/polling';
import { type ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { requestAPI } from './handler';
import { serverGone } from './servergone';
import type { ILocalizer } from './i18n';

/** The server's view of the flag. */
export interface IStopWhenDone {
  state: 'off' | 'armed' | 'saving' | 'stopping';
  flagged_at: string | null;
  run_seen: boolean;
  busy_kernels: number;
  deadline: string | null;
}

/** Calls to the server extension; replaced in tests. */
export interface IStopWhenDoneAPI {
  get(): Promise<IStopWhenDone>;
  set(enabled: boolean): Promise<IStopWhenDone>;
  saved(): Promise<IStopWhenDone>;
}

export const serverAPI: IStopWhenDoneAPI = {
  get: async () => (await requestAPI<IStopWhenDone>('stop-when-done')).data,
  set: async (enabled: boolean) =>
    (
      await requestAPI<IStopWhenDone>('stop-when-done', {
        method: 'POST',
        body: JSON.stringify({ enabled })
      })
    ).data,
  saved: async () =>
    (
      await requestAPI<IStopWhenDone>('stop-when-done/saved', {
        method: 'POST',
        body: '{}'
      })
    ).data
};

/**
 * The flag as this Lab knows it, polled while this server runs (a kernel may set it too).
 *
 * The poll ends for good once the server is gone: the hub's 424 for this server (stopped by the
 * flag, by the user, the culler or the budget). Other failures back off.
 */
export class StopWhenDoneModel {
  constructor(options: StopWhenDoneModel.IOptions) {
    this._api = options.api ?? serverAPI;
    this._save = options.save;
    const interval = options.interval ?? 2000;
    this._poll = new Poll({
      name: 'jupyterhub-gpu:stop-when-done',
      factory: () => this._tick(),
      frequency: { interval, backoff: true, max: Math.max(interval, 60_000) },
      standby: () => (this.enabled ? false : 'when-hidden')
    });
  }

  /** Whether the server is gone (the session is over): nothing is polled any more. */
  get ended(): boolean {
    return this._ended;
  }

  /** The last state from the server (null before the first answer). */
  get state(): IStopWhenDone | null {
    return this._state;
  }

  /** Whether the flag is set (armed, saving or stopping). */
  get enabled(): boolean {
    return !!this._state && this._state.state !== 'off';
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Set or clear the flag. */
  async toggle(): Promise<void> {
    await this.set(!this.enabled);
  }

  async set(enabled: boolean): Promise<void> {
    this._update(await this._api.set(enabled));
  }

  /** Read the server's state; when the run is over, save and let the server stop. */
  async refresh(): Promise<void> {
    if (this._ended) {
      return;
    }
    let state: IStopWhenDone;
    try {
      state = await this._api.get();
    } catch (error) {
      if (serverGone(error)) {
        this._end();
        return;
      }
      throw error;
    }
    this._update(state);
    if (state.state === 'saving' && !this._saving) {
      this._saving = true;
      try {
        await this._save();
      } finally {
        this._update(await this._api.saved());
      }
    } else if (state.state !== 'saving') {
      this._saving = false;
    }
  }

  dispose(): void {
    this._poll.dispose();
  }

  /** One poll; after the server is gone the poll stops instead of asking again. */
  private async _tick(): Promise<void> {
    await this.refresh();
    if (this._ended && !this._poll.isDisposed) {
      void this._poll.stop();
    }
  }

  /** The server is gone: its last state is 'stopping' (billing stopped) and the poll ends. */
  private _end(): void {
    this._ended = true;
    this._saving = false;
    if (this._state && this._state.state !== 'off') {
      this._update({ ...this._state, state: 'stopping' });
    } else {
      this._changed.emit();
    }
  }

  private _update(state: IStopWhenDone): void {
    const before = JSON.stringify(this._state);
    this._state = state;
    if (JSON.stringify(state) !== before) {
      this._changed.emit();
    }
  }

  private _api: IStopWhenDoneAPI;
  private _save: () => Promise<unknown>;
  private _poll: Poll;
  private _state: IStopWhenDone | null = null;
  private _saving = false;
  private _ended = false;
  private _changed = new Signal<this, void>(this);
}

export namespace StopWhenDoneModel {
  export interface IOptions {
    /** Save every open document (the `docmanager:save-all` command). */
    save: () => Promise<unknown>;
    api?: IStopWhenDoneAPI;
    interval?: number;
  }
}

/** The status bar text of a state, or '' when the flag is off. */
export function stopWhenDoneText(
  state: IStopWhenDone | null,
  tr: ILocalizer
): string {
  switch (state?.state) {
    case 'armed':
      return state.run_seen || state.busy_kernels > 0
        ? tr.__('Stops when the running cells finish')
        : tr.__('Stops after the next run finishes');
    case 'saving':
      return tr.__('Run finished: saving notebooks, then stopping');
    case 'stopping':
      return tr.__('Server stopping (billing stops)');
    default:
      return '';
  }
}

/**
 * A toggle (status bar and side panel): a checkbox "Stop this server when the running
 * cells finish", and the flag's state next to it.
 */
export class StopWhenDoneToggle extends Widget {
  constructor(options: StopWhenDoneToggle.IOptions) {
    super();
    this._options = options;
    this.addClass('jp-gpu-StopWhenDone');
    if (options.compact) {
      this.addClass('jp-gpu-StopWhenDone-compact');
    }
    const label = document.createElement('label');
    this._box = document.createElement('input');
    this._box.type = 'checkbox';
    this._box.addEventListener('change', () => {
      void options.model.set(this._box.checked).catch(error => {
        this._box.checked = options.model.enabled;
        this._status.textContent = String(error?.message ?? error);
      });
    });
    this._label = document.createElement('span');
    label.append(this._box, this._label);
    this._status = document.createElement('span');
    this._status.className = 'jp-gpu-StopWhenDone-status';
    this.node.append(label, this._status);
    options.model.changed.connect(this.render, this);
    this.render();
  }

  render(): void {
    const tr = this._options.localizer();
    const { model } = this._options;
    this._label.textContent = tr.__(
      'Stop this server when the running cells finish'
    );
    this._box.checked = model.enabled;
    this._box.disabled = model.state?.state === 'stopping';
    this._status.textContent = stopWhenDoneText(model.state, tr);
    if (this._options.compact) {
      // in the status bar only the flag's state shows, and only while it is set
      this.node.hidden = !model.enabled;
      this._label.textContent = '';
      this._box.title = tr.__('Stop this server when the running cells finish');
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._options.model.changed.disconnect(this.render, this);
    super.dispose();
  }

  private _options: StopWhenDoneToggle.IOptions;
  private _box: HTMLInputElement;
  private _label: HTMLSpanElement;
  private _status: HTMLSpanElement;
}

export namespace StopWhenDoneToggle {
  export interface IOptions {
    model: StopWhenDoneModel;
    localizer: () => ILocalizer;
    /** The status bar's form: the state only, shown while the flag is set. */
    compact?: boolean;
  }
}
