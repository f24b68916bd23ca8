/**
 * `GpuStats`, what the `jupyterhub-gpu:stats` plugin provides as `IGpuStats`: the stats
 * model of the page, the settings (defaults until the settings plugin configures it) and
 * the localizer of JupyterLab's language.
 */
import type { ITranslator } from '@jupyterlab/translation';
import type { IDisposable } from '@lumino/disposable';
import { type ISignal, Signal } from '@lumino/signaling';

import { type ILocalizer, makeLocalizer } from './i18n';
import { StatsModel } from './model';
import { DEFAULT_SETTINGS, type ISettings } from './settings';
import type { IGpuStats } from './tokens';

/** The shared stats model, settings and localizer. */
export class GpuStats implements IGpuStats, IDisposable {
  constructor(options: GpuStats.IOptions) {
    this._settings = { ...DEFAULT_SETTINGS };
    this._tr = makeLocalizer(options.translator);
    this.model =
      options.model ??
      new StatsModel({ interval: this._settings.pollInterval });
  }

  readonly model: StatsModel;

  get settings(): ISettings {
    return this._settings;
  }

  /** The localizer of the current language (a stable function: pass it to views). */
  readonly localizer = (): ILocalizer => this._tr;

  get settingsChanged(): ISignal<this, void> {
    return this._settingsChanged;
  }

  get isDisposed(): boolean {
    return this.model.isDisposed;
  }

  configure(settings: ISettings): void {
    this._settings = settings;
    this.model.interval = settings.pollInterval;
    this._settingsChanged.emit();
  }

  dispose(): void {
    this.model.dispose();
    Signal.clearData(this);
  }

  private _settings: ISettings;
  private readonly _tr: ILocalizer;
  private _settingsChanged = new Signal<this, void>(this);
}

/** GpuStats statics. */
export namespace GpuStats {
  /** What the shared stats need. */
  export interface IOptions {
    /** JupyterLab's translator: its language, and its catalogs after the built-in ones. */
    translator: ITranslator;
    /** The stats model (default: one polling `gpu/api/v1/stats`). */
    model?: StatsModel;
  }
}
