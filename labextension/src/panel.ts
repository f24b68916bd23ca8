/**
 * The side panel: live charts of GPU utilization and memory over the session, the cost,
 * rate and budget, the profile and its GPUs, and the "Open TensorBoard" and "Stop my
 * server" actions.
 *
 * Plain DOM and SVG (no chart library): the skeleton is built once and only its text and
 * paths change on each poll, so buttons keep focus and nothing flickers. The charts are
 * `chart.ts`, the actions `actions.ts`; other boxes (the right-sizing advice) are given by
 * the plugin wiring as `sections`, so this view imports no other view.
 */
import { Widget } from '@lumino/widgets';

import { usagePageUrl } from './actions';
import { Chart, chartPaths } from './chart';
import { el } from './dom';
import {
  budgetText,
  deviceLabel,
  gpuBusyText,
  gpuName,
  historyWithNow,
  isMig,
  meanUtilization,
  memoryKnown,
  memoryUnknownTitle,
  migProfile,
  ownMemoryText,
  sharedUnit,
  totalMemory
} from './figures';
import {
  formatClock,
  formatGB,
  formatMinutes,
  formatMoney,
  formatPercent,
  formatSeconds,
  parseTime
} from './format';
import { type ILocalizer, serverText } from './i18n';
import type { StatsModel } from './model';
import type { IGpu, IStats } from './types';

/** The side panel widget. */
export class GpuPanel extends Widget {
  constructor(options: GpuPanel.IOptions) {
    super();
    this._options = options;
    this._sections = options.sections ?? [];
    this.id = 'jupyterhub-gpu-panel';
    this.addClass('jp-gpu-Panel');
    this._build();
    options.model.changed.connect(this._onModelChanged, this);
    this.render();
  }

  /** Update every figure from the model (only while the panel is visible). */
  render(): void {
    const tr = this._options.localizer();
    this._renderLabels(tr);
    if (!this.isVisible) {
      return;
    }
    const { model } = this._options;
    const stats = model.stats;

    this._badge.hidden = !stats?.simulated;
    this._renderBanner(tr);

    this._summary.hidden = !stats;
    this._charts.hidden = !stats || stats.gpus.length === 0;
    this._reason.hidden = !stats || stats.gpus.length > 0;
    this._gpuSection.hidden = !stats || stats.gpus.length === 0;
    if (stats) {
      this._renderSummary(stats, tr);
      for (const section of this._sections) {
        section.update(stats, tr);
      }
      if (stats.gpus.length > 0) {
        this._renderCharts(stats, tr);
        this._renderGpus(stats, tr);
      } else {
        this._reasonTitle.textContent = tr.__('No GPU figures');
        this._reasonText.textContent = serverText(
          stats.reason ?? 'No GPU is assigned to this server.',
          tr
        );
      }
    }
    this._tensorboard.hidden = !stats?.tensorboard_url;
    this._footer.textContent =
      model.receivedAt === null
        ? ''
        : tr.__(
            'Updated %1 ago',
            formatSeconds((Date.now() - model.receivedAt) / 1000, tr)
          );
  }

  /** Add a control (e.g. the "stop when done" toggle) below the panel's buttons. */
  addAction(node: HTMLElement): void {
    this._footer.before(node);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._options.model.changed.disconnect(this._onModelChanged, this);
    super.dispose();
  }

  protected onAfterShow(): void {
    this.render();
  }

  private _onModelChanged(): void {
    this.render();
  }

  /** Build the skeleton once. */
  private _build(): void {
    const root = this.node;
    const header = el('div', 'jp-gpu-Panel-header');
    this._title = el('h2', 'jp-gpu-Panel-title');
    this._badge = el('span', 'jp-gpu-Badge');
    header.append(this._title, this._badge);

    this._banner = el('div', 'jp-gpu-Banner');
    this._summary = el('dl', 'jp-gpu-Summary');
    this._reason = el('div', 'jp-gpu-Reason');
    this._reasonTitle = el('strong');
    this._reasonText = el('p');
    this._reason.append(this._reasonTitle, this._reasonText);

    this._charts = el('div', 'jp-gpu-Charts');
    this._utilChart = new Chart('jp-gpu-Chart-util');
    this._memChart = new Chart('jp-gpu-Chart-mem');
    this._charts.append(this._utilChart.node, this._memChart.node);

    this._gpuSection = el('div', 'jp-gpu-Gpus');
    this._gpuHeading = el('h3');
    this._gpuList = el('ul', 'jp-gpu-GpuList');
    this._gpuSection.append(this._gpuHeading, this._gpuList);

    const actions = el('div', 'jp-gpu-Actions');
    this._tensorboard = el('button', 'jp-Button jp-mod-styled jp-mod-reject');
    this._tensorboard.addEventListener('click', () => {
      const url = this._options.model.stats?.tensorboard_url;
      if (url) {
        this._options.onOpenTensorBoard(url);
      }
    });
    this._stop = el('button', 'jp-Button jp-mod-styled jp-mod-warn');
    this._stop.addEventListener('click', () => this._options.onStop());
    this._usage = el('a', 'jp-gpu-UsageLink');
    this._usage.target = '_blank';
    this._usage.rel = 'noopener';
    const usage = usagePageUrl();
    this._usage.hidden = !usage;
    if (usage) {
      this._usage.href = usage;
    }
    actions.append(this._tensorboard, this._stop, this._usage);

    this._footer = el('div', 'jp-gpu-Footer');
    root.append(
      header,
      this._banner,
      this._summary,
      ...this._sections.map(section => section.node),
      this._reason,
      this._charts,
      this._gpuSection,
      actions,
      this._footer
    );
  }

  /** Texts that change only with the language. */
  private _renderLabels(tr: ILocalizer): void {
    this._title.textContent = tr.__('GPU usage and cost');
    this._badge.textContent = tr.__('Simulated');
    this._gpuHeading.textContent = tr.__('GPUs');
    this._tensorboard.textContent = tr.__('Open TensorBoard');
    this._stop.textContent = tr.__('Stop my server (stop billing)');
    this._usage.textContent = tr.__('My usage and budgets (all sessions)');
    this.title.caption = tr.__('GPU usage and cost');
  }

  private _renderBanner(tr: ILocalizer): void {
    const { model } = this._options;
    const lines: string[] = [];
    if (model.stats?.simulated) {
      lines.push(
        tr.__('Simulated GPUs: these figures are not from real hardware.')
      );
    }
    if (model.error) {
      lines.push(
        model.stats
          ? tr.__(
              'Cannot reach the GPU stats (%1); the figures below are out of date.',
              model.error
            )
          : tr.__('Cannot reach the GPU stats: %1', model.error)
      );
    } else if (model.stale) {
      lines.push(
        tr.__('The GPU figures are out of date: the sampler is behind.')
      );
    }
    if (model.stats && !model.stats.service_available) {
      lines.push(
        tr.__(
          'The billing service is unreachable: cost and budget may be out of date.'
        )
      );
    }
    this._banner.textContent = lines.join('\n');
    this._banner.hidden = lines.length === 0;
    this._banner.classList.toggle(
      'jp-mod-warn',
      !!model.error || model.stale || model.stats?.service_available === false
    );
  }

  private _renderSummary(stats: IStats, tr: ILocalizer): void {
    const rows: Array<[string, string]> = [];
    const session = stats.session;
    rows.push([tr.__('Running on'), deviceLabel(stats, tr)]);
    const unit = sharedUnit(stats.gpus ?? []);
    if (unit) {
      rows.push([
        tr.__('GPU share'),
        isMig(unit)
          ? tr.__(
              'MIG slice %1: %2 GB, its compute your own',
              migProfile(unit),
              formatGB(unit.memory_total_mib)
            )
          : tr.__(
              '%1 of the GPU: %2 GB memory cap, compute shared',
              unit.share ?? '',
              formatGB(unit.memory_total_mib)
            )
      ]);
    }
    if (session) {
      rows.push([tr.__('Profile'), session.display_name || session.profile]);
      rows.push([
        tr.__('Cost so far'),
        tr.__(
          '%1 for %2',
          formatMoney(
            session.cost,
            session.currency_symbol,
            session.currency,
            tr.language
          ),
          formatMinutes(session.minutes_billed, tr)
        )
      ]);
      rows.push([
        tr.__('Rate'),
        tr.__(
          '%1 per minute',
          formatMoney(
            session.rate_per_minute,
            session.currency_symbol,
            session.currency,
            tr.language
          )
        )
      ]);
      const started = parseTime(session.started);
      if (Number.isFinite(started)) {
        rows.push([
          tr.__('Started'),
          new Date(started).toLocaleString(tr.language)
        ]);
      }
      const budget = budgetText(session, tr);
      if (budget) {
        rows.push([tr.__('Budget'), budget]);
      }
      if (
        session.budget_minutes_left !== null &&
        session.budget_minutes_left !== undefined
      ) {
        rows.push([
          tr.__('Budget lasts'),
          tr.__(
            'about %1 at this rate',
            formatMinutes(session.budget_minutes_left, tr)
          )
        ]);
      }
    } else {
      rows.push([
        tr.__('Cost so far'),
        tr.__('unknown (no billed session found)')
      ]);
    }
    this._summary.replaceChildren(
      ...rows.flatMap(([term, value]) => [
        el('dt', '', term),
        el('dd', '', value)
      ])
    );
  }

  private _renderCharts(stats: IStats, tr: ILocalizer): void {
    const history = historyWithNow(stats);
    const util = history.map(p => ({
      t: parseTime(p.t),
      v: p.utilization_percent
    }));
    const peakUtil = Math.max(0, ...util.map(p => p.v ?? 0));
    this._utilChart.update({
      title: tr.__('GPU utilization'),
      caption: tr.__(
        'now %1 · peak %2',
        formatPercent(meanUtilization(stats.gpus)),
        formatPercent(peakUtil)
      ),
      paths: chartPaths(util, 100),
      top: '100%',
      start: formatClock(util[0]?.t, tr),
      end: tr.__('now')
    });

    const memory = totalMemory(stats.gpus);
    const totalMiB =
      memory?.total ??
      Math.max(0, ...history.map(p => p.memory_total_mib ?? 0));
    // where this server's own memory cannot be measured (memory_known false), its 0s are
    // no measurement: the chart draws nothing and says so
    const unmeasured = stats.gpus.find(gpu => !memoryKnown(gpu));
    const mem = history.map(p => ({
      t: parseTime(p.t),
      v: unmeasured ? null : p.memory_used_mib
    }));
    const peakMem = Math.max(0, ...mem.map(p => p.v ?? 0));
    this._memChart.node.title = unmeasured
      ? memoryUnknownTitle(unmeasured, tr)
      : '';
    this._memChart.update({
      title: tr.__('GPU memory'),
      caption: unmeasured
        ? tr.__('not measurable here')
        : tr.__(
            'now %1 of %2 GB · peak %3 GB',
            formatGB(memory?.used),
            formatGB(totalMiB),
            formatGB(peakMem)
          ),
      paths: chartPaths(mem, totalMiB),
      top: tr.__('%1 GB', formatGB(totalMiB)),
      start: formatClock(mem[0]?.t, tr),
      end: tr.__('now')
    });
  }

  private _renderGpus(stats: IStats, tr: ILocalizer): void {
    const items = stats.gpus.map(gpu => {
      const item = el('li');
      item.title = gpu.uuid;
      const figures = gpu.share
        ? sharedFigures(gpu, tr)
        : [
            tr.__('GPU %1', formatPercent(gpu.utilization_percent)),
            tr.__(
              '%1/%2 GB',
              memoryKnown(gpu) ? formatGB(gpu.memory_used_mib) : '?',
              formatGB(gpu.memory_total_mib)
            )
          ];
      if (gpu.temperature_c !== null && gpu.temperature_c !== undefined) {
        figures.push(tr.__('%1 °C', Math.round(gpu.temperature_c)));
      }
      if (gpu.power_w !== null && gpu.power_w !== undefined) {
        figures.push(tr.__('%1 W', Math.round(gpu.power_w)));
      }
      item.append(
        el(
          'div',
          'jp-gpu-GpuName',
          `${gpu.index}: ${gpuName(gpu.name, stats.simulated, tr)}`
        ),
        el('div', 'jp-gpu-GpuFigures', figures.join(' · '))
      );
      if (!memoryKnown(gpu)) {
        (item.lastChild as HTMLElement).title = memoryUnknownTitle(gpu, tr);
      }
      return item;
    });
    this._gpuList.replaceChildren(...items);
  }

  private _options: GpuPanel.IOptions;
  private _sections: readonly GpuPanel.ISection[];
  private _title!: HTMLElement;
  private _badge!: HTMLElement;
  private _banner!: HTMLElement;
  private _summary!: HTMLElement;
  private _reason!: HTMLElement;
  private _reasonTitle!: HTMLElement;
  private _reasonText!: HTMLElement;
  private _charts!: HTMLElement;
  private _utilChart!: Chart;
  private _memChart!: Chart;
  private _gpuSection!: HTMLElement;
  private _gpuHeading!: HTMLElement;
  private _gpuList!: HTMLElement;
  private _tensorboard!: HTMLButtonElement;
  private _stop!: HTMLButtonElement;
  private _usage!: HTMLAnchorElement;
  private _footer!: HTMLElement;
}

/**
 * A share's or slice's figures in the GPU list: its own memory under its cap, how busy the
 * GPU is, and this server's own utilization where the driver gives it per process.
 */
export function sharedFigures(gpu: IGpu, tr: ILocalizer): string[] {
  const figures = [ownMemoryText(gpu, tr)];
  if (isMig(gpu)) {
    figures.push(gpuBusyText(gpu, tr));
    return figures;
  }
  if (gpu.scope === 'own') {
    figures.push(tr.__('your use %1', formatPercent(gpu.utilization_percent)));
  }
  figures.push(gpuBusyText(gpu, tr));
  return figures;
}

/** GpuPanel statics. */
export namespace GpuPanel {
  /**
   * A box below the summary (the right-sizing advice), given by the plugin wiring:
   * updated on each render while there are stats.
   */
  export interface ISection {
    readonly node: HTMLElement;
    update(stats: IStats | null, tr: ILocalizer): void;
  }

  /** What the panel needs. */
  export interface IOptions {
    model: StatsModel;
    localizer: () => ILocalizer;
    onStop: () => void;
    onOpenTensorBoard: (url: string) => void;
    /** Boxes shown between the summary and the charts, in this order. */
    sections?: readonly ISection[];
  }
}
