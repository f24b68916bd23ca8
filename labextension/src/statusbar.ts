/**
 * The status bar item: one line such as "T4 · GPU 63% · 10.0/15.0 GB · ¥0.60 (12 min) · ¥87.40 left".
 *
 * `statusText` builds the line from the model's state and the settings (a pure function);
 * `GpuStatusItem` shows it and opens the side panel when clicked.
 */
import { Widget } from '@lumino/widgets';

import {
  formatDecimal,
  formatGB,
  formatMinutes,
  formatMoney,
  formatPercent,
  formatSeconds
} from './format';
import type { ILocalizer } from './i18n';
import type { IStatsState, StatsModel } from './model';
import type { ISettings } from './settings';
import type { IGpu, ISession, IStats } from './types';

/** Separator between the parts of the line. */
export const SEPARATOR = ' · ';

/** The GPU label: "T4", "2× A100", or "CPU only"; tagged "(simulated)" when simulated. */
export function deviceLabel(stats: IStats, tr: ILocalizer): string {
  const gpus = stats.gpus ?? [];
  let label: string;
  if (gpus.length === 0) {
    label = tr.__('CPU only');
  } else {
    const model = stats.session?.gpu_model || gpus[0].name;
    label = gpus.length > 1 ? tr.__('%1× %2', gpus.length, model) : model;
  }
  return stats.simulated ? tr.__('%1 (simulated)', label) : label;
}

/** Mean utilization of the GPUs, or null when none reports one. */
export function meanUtilization(gpus: IGpu[]): number | null {
  const values = gpus
    .map(gpu => gpu.utilization_percent)
    .filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
  if (values.length === 0) {
    return null;
  }
  return values.reduce((a, b) => a + b, 0) / values.length;
}

/** Memory used and total over all GPUs in MiB, or null when unknown. */
export function totalMemory(
  gpus: IGpu[]
): { used: number; total: number } | null {
  let used = 0;
  let total = 0;
  for (const gpu of gpus) {
    if (
      typeof gpu.memory_used_mib !== 'number' ||
      typeof gpu.memory_total_mib !== 'number'
    ) {
      return null;
    }
    used += gpu.memory_used_mib;
    total += gpu.memory_total_mib;
  }
  return gpus.length > 0 ? { used, total } : null;
}

/** The cost so far: "¥0.60 (12 min)". */
export function costText(session: ISession, tr: ILocalizer): string {
  return tr.__(
    '%1 (%2)',
    formatMoney(session.cost, session.currency_symbol, session.currency),
    formatMinutes(session.minutes_billed, tr)
  );
}

/** The remaining budget: "¥87.40 left" or "12.5 GPU-h left"; null when there is no budget. */
export function budgetText(session: ISession, tr: ILocalizer): string | null {
  const remaining = session.budget_remaining;
  if (remaining === null || remaining === undefined) {
    return null;
  }
  if (session.budget_unit === 'gpu_hours') {
    return tr.__('%1 GPU-h left', formatDecimal(remaining, 0) ?? remaining);
  }
  return tr.__(
    '%1 left',
    formatMoney(remaining, session.currency_symbol, session.currency)
  );
}

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
  if (gpus.length > 0 && settings.showUtilization) {
    parts.push(tr.__('GPU %1', formatPercent(meanUtilization(gpus))));
  }
  const memory = totalMemory(gpus);
  if (memory && settings.showMemory) {
    parts.push(
      tr.__('%1/%2 GB', formatGB(memory.used), formatGB(memory.total))
    );
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
