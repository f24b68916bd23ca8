/**
 * The status bar item: one line such as "T4 · GPU 63% · 10.0/15.0 GB · ¥0.60 (12 min) · ¥87.40 left"
 * (on a share of a GPU: "1/4 T4 · your share: 3.1 of 4.0 GB · GPU busy 40% (shared by 3) · …").
 *
 * `statusText` builds the line from the model's state and the settings (a pure function);
 * `GpuStatusItem` shows it and opens the side panel when clicked.
 */
import { Widget } from '@lumino/widgets';

import {
  budgetText,
  costText,
  deviceLabel,
  gpuBusyText,
  isMig,
  meanUtilization,
  memoryKnown,
  memoryUnknownTitle,
  ownMemoryText,
  sharedUnit,
  totalMemory,
  usedGB
} from './figures';
import { formatGB, formatPercent, formatSeconds } from './format';
import type { ILocalizer } from './i18n';
import type { IStatsState, StatsModel } from './model';
import type { ISettings } from './settings';

/** Separator between the parts of the line. */
export const SEPARATOR = ' · ';

/**
 * The status bar line for the model's state and the user's settings.
 */
export function statusText(
  state: IStatsState,
  settings: ISettings,
  tr: ILocalizer
): string {
  const stats = state.stats;
  if (!stats) {
    return state.error ? tr.__('GPU stats unavailable') : tr.__('GPU …');
  }
  const gpus = stats.gpus ?? [];
  const parts = [deviceLabel(stats, tr)];
  const unit = sharedUnit(gpus);
  if (unit) {
    // a share or MIG slice: "your share: 3.1 of 4.0 GB · GPU busy 40% (shared by 3)"
    if (settings.showMemory) {
      parts.push(ownMemoryText(unit, tr));
    }
    if (settings.showUtilization) {
      parts.push(gpuBusyText(unit, tr));
    }
  } else {
    if (gpus.length > 0 && settings.showUtilization) {
      parts.push(tr.__('GPU %1', formatPercent(meanUtilization(gpus))));
    }
    const memory = totalMemory(gpus);
    if (memory && settings.showMemory) {
      parts.push(
        tr.__('%1/%2 GB', usedGB(memory.used), formatGB(memory.total))
      );
    }
  }
  const session = stats.session;
  if (session && settings.showCost) {
    parts.push(costText(session, tr));
  }
  const budget =
    session && settings.showBudget ? budgetText(session, tr) : null;
  if (budget) {
    parts.push(budget);
  }
  if (state.stale) {
    parts.push(tr.__('stale'));
  }
  return parts.join(SEPARATOR);
}

/** The tooltip of the status bar item. */
export function statusTitle(
  state: IStatsState,
  tr: ILocalizer,
  now: number = Date.now()
): string {
  const lines: string[] = [];
  if (state.stats?.simulated) {
    lines.push(
      tr.__('Simulated GPUs: these figures are not from real hardware.')
    );
  }
  const unit = sharedUnit(state.stats?.gpus ?? []);
  if (unit && !isMig(unit)) {
    lines.push(
      tr.__(
        'A share of a GPU: the memory figures are your own, under your cap; the GPU’s compute is shared, so speed varies with what the others on it run.'
      )
    );
    if (unit.scope === 'gpu') {
      lines.push(
        tr.__(
          'Your own part of the GPU’s time cannot be read here: the utilization is the whole GPU’s, the others’ included.'
        )
      );
    }
  } else if (unit) {
    lines.push(
      tr.__(
        'A MIG slice of a GPU: its memory and compute are your own; the figures are the slice’s.'
      )
    );
  }
  const unmeasured = (state.stats?.gpus ?? []).find(gpu => !memoryKnown(gpu));
  if (unmeasured) {
    lines.push(memoryUnknownTitle(unmeasured, tr));
  }
  if (state.stats?.reason) {
    lines.push(state.stats.reason);
  }
  if (state.error) {
    lines.push(tr.__('Cannot reach the GPU stats: %1', state.error));
  }
  if (state.receivedAt !== null) {
    lines.push(
      tr.__(
        'Updated %1 ago',
        formatSeconds((now - state.receivedAt) / 1000, tr)
      )
    );
  }
  lines.push(tr.__('Click to show GPU usage and cost.'));
  return lines.join('\n');
}

/** The status bar widget. */
export class GpuStatusItem extends Widget {
  constructor(options: GpuStatusItem.IOptions) {
    super({ node: document.createElement('div') });
    this._options = options;
    this.addClass('jp-gpu-StatusItem');
    this.addClass('jp-mod-highlighted');
    this._text = document.createElement('span');
    this._text.className = 'jp-StatusBar-TextItem';
    this.node.appendChild(this._text);
    this.node.addEventListener('click', () => options.onClick());
    options.model.changed.connect(this.render, this);
    this.render();
  }

  /** Update the text from the model, settings and language. */
  render(): void {
    const { model, settings, localizer } = this._options;
    const tr = localizer();
    this._text.textContent = statusText(model, settings(), tr);
    this.node.title = statusTitle(model, tr);
    this.toggleClass('jp-mod-stale', model.stale);
    this.toggleClass('jp-mod-simulated', !!model.stats?.simulated);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._options.model.changed.disconnect(this.render, this);
    super.dispose();
  }

  private _options: GpuStatusItem.IOptions;
  private _text: HTMLSpanElement;
}

/** GpuStatusItem statics. */
export namespace GpuStatusItem {
  /** What the item needs. */
  export interface IOptions {
    model: StatsModel;
    settings: () => ISettings;
    localizer: () => ILocalizer;
    onClick: () => void;
  }
}
