/**
 * The live stats of this server: one Lumino `Poll` of `GET gpu/api/v1/stats`.
 *
 * The poll backs off on errors and stands by while the browser tab is hidden. The model
 * keeps the last good answer, whether it is stale, and the last error; views listen to
 * `changed`.
 */
import type { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { type ISignal, Signal } from '@lumino/signaling';

import { isStale, parseTime } from './format';
import { type IAPIResult, requestAPI } from './handler';
import { serverGone } from './servergone';
import type { IStats } from './types';

/** The longest wait between two polls while the server keeps failing, in ms. */
export const MAX_BACKOFF = 60_000;

/** What the views show: the last answer and how fresh it is. */
export interface IStatsState {
  /** The last good answer, or null before the first one. */
  readonly stats: IStats | null;
  /** Whether the figures are old: the sampler lags or the last poll failed. */
  readonly stale: boolean;
  /** The last poll's error message, or null when it succeeded. */
  readonly error: string | null;
  /** When the last good answer arrived (browser clock, ms), or null. */
  readonly receivedAt: number | null;
}

/** Fetch the stats; replaced in tests. */
export type StatsFetcher = () => Promise<IAPIResult<IStats>>;

/** The live stats model. */
export class StatsModel implements IStatsState, IDisposable {
  constructor(options: StatsModel.IOptions = {}) {
    this._fetch = options.fetch ?? (() => requestAPI<IStats>('stats'));
    this._poll = new Poll<IAPIResult<IStats>, Error>({
      name: 'jupyterhub-gpu:stats',
      factory: () => this._fetch(),
      frequency: {
        interval: options.interval ?? 5000,
        backoff: true,
        max: MAX_BACKOFF
      },
      standby: options.standby ?? 'when-hidden'
    });
    this._poll.ticked.connect(this._onTick, this);
  }

  get stats(): IStats | null {
    return this._stats;
  }

  get stale(): boolean {
    return this._stale;
  }

  get error(): string | null {
    return this._error;
  }

  get receivedAt(): number | null {
    return this._receivedAt;
  }

  /** Whether the server is gone (the hub answered 424): the poll has stopped for good. */
  get ended(): boolean {
    return this._ended;
  }

  /** Emitted after every poll, good or failed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** The poll interval in ms. */
  get interval(): number {
    return this._poll.frequency.interval;
  }

  set interval(value: number) {
    if (value !== this._poll.frequency.interval) {
      this._poll.frequency = { ...this._poll.frequency, interval: value };
    }
  }

  /** Poll now; resolves after the answer has been handled. */
  async refresh(): Promise<void> {
    if (this._ended) {
      return; // the server is gone: nothing to ask
    }
    await this._poll.refresh();
    await this._poll.tick;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _onTick(poll: Poll<IAPIResult<IStats>, Error>): void {
    const { phase, payload } = poll.state;
    if (phase === 'resolved' && payload) {
      this._update(payload as IAPIResult<IStats>);
    } else if (phase === 'rejected') {
      this._error = Private.message(payload);
      this._stale = true;
      if (serverGone(payload)) {
        // the hub says this server is not running: the session is over, asking again only adds
        // a `424 GET .../gpu/api/v1/stats` line to the hub's log each time
        this._ended = true;
        void poll.stop();
      }
      this._changed.emit();
    }
  }

  private _update(result: IAPIResult<IStats>): void {
    const stats = result.data;
    const now = result.serverTime ?? Date.now();
    this._stats = stats;
    this._error = null;
    this._receivedAt = Date.now();
    // Without GPUs there is no sample to age (sampled_at is null): only failed polls are stale.
    this._stale =
      (stats.gpus ?? []).length > 0 &&
      isStale(parseTime(stats.sampled_at), stats.interval_seconds, now);
    this._changed.emit();
  }

  private _fetch: StatsFetcher;
  private _poll: Poll<IAPIResult<IStats>, Error>;
  private _stats: IStats | null = null;
  private _stale = false;
  private _error: string | null = null;
  private _receivedAt: number | null = null;
  private _ended = false;
  private _changed = new Signal<this, void>(this);
}

/** StatsModel statics. */
export namespace StatsModel {
  /** Options of the model. */
  export interface IOptions {
    /** Poll interval in ms (default 5000). */
    interval?: number;
    /** The fetcher (default: `requestAPI('stats')`). */
    fetch?: StatsFetcher;
    /** When the poll stands by (default: while the tab is hidden). */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
  }
}

namespace Private {
  /** A short text for a failed poll. */
  export function message(error: unknown): string {
    if (error instanceof Error && error.message) {
      return error.message;
    }
    return String(error ?? 'unknown error');
  }
}
