/**
 * The tokens the plugins share (see `index.ts`).
 *
 * `IGpuStats` is the one stats model of the page: the `jupyterhub-gpu:stats` plugin
 * provides it, and the status bar, panel, notices, jobs and "stop when done" plugins
 * require it, so every view shows the same poll in the same language and settings.
 */
import { Token } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

import type { ILocalizer } from './i18n';
import type { StatsModel } from './model';
import type { ISettings } from './settings';
import type { StopWhenDoneModel } from './stopwhendone';

/** What every view of this extension shares. */
export interface IGpuStats {
  /** The live stats of this server: one poll for every view. */
  readonly model: StatsModel;
  /** The user's settings (the defaults until the settings registry answers). */
  readonly settings: ISettings;
  /** The localizer of the settings' language: call it at each render, it changes with them. */
  readonly localizer: () => ILocalizer;
  /** Emitted after the settings changed (views render again, commands relabel). */
  readonly settingsChanged: ISignal<IGpuStats, void>;
  /** Take new settings: language, poll interval and what the status bar shows. */
  configure(settings: ISettings): void;
}

/** The stats model, settings and localizer of the page. */
export const IGpuStats = new Token<IGpuStats>(
  'jupyterhub-gpu:stats',
  'The live GPU stats of this server, with the settings and language every view of jupyterhub-gpu uses.'
);

/** The "stop when done" flag, shared by its status bar item and the panel's toggle. */
export const IStopWhenDoneModel = new Token<StopWhenDoneModel>(
  'jupyterhub-gpu:stop-when-done',
  'The "stop this server when the running cells finish" flag of this server.'
);
