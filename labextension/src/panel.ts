/**
 * The side panel: live charts of GPU utilization and memory over the session, the cost,
 * rate and budget, the profile and its GPUs, and the "Open TensorBoard" and "Stop my
 * server" actions.
 *
 * Plain DOM and SVG (no chart library): the skeleton is built once and only its text and
 * paths change on each poll, so buttons keep focus and nothing flickers.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { Widget } from '@lumino/widgets';

import {
  formatGB,
  formatMinutes,
  formatMoney,
  formatPercent,
  formatSeconds,
  parseTime
} from './format';
import { AdviceView } from './advice';
import { requestAPI } from './handler';
import { type ILocalizer, serverText } from './i18n';
import type { StatsModel } from './model';
import {
  budgetText,
  deviceLabel,
  meanUtilization,
  totalMemory
} from './statusbar';
import type { IHistoryPoint, IStats } from './types';

const SVG_NS = 'http://www.w3.org/2000/svg';

/** Width and height of the chart's coordinate system (the SVG scales to the panel). */
export const CHART_WIDTH = 300;
export const CHART_HEIGHT = 80;

/** One point of a chart: time (ms) and value (null for a gap). */
export interface IChartPoint {
  t: number;
  v: number | null;
}

/**
 * The SVG path data of a time series: `line` for the stroke and `area` for the fill.
 *
 * Time runs left to right from the first to the last point; values run from 0 at the
 * bottom to `max` at the top (clamped). A null value breaks the line.
 */
export function chartPaths(
  points: IChartPoint[],
  max: number,
  width = CHART_WIDTH,
  height = CHART_HEIGHT
): { line: string; area: string } {
  const valid = points.filter(p => Number.isFinite(p.t));
  if (valid.length === 0 || !(max > 0)) {
    return { line: '', area: '' };
  }
  const t0 = valid[0].t;
  const span = valid[valid.length - 1].t - t0;
  const x = (t: number): number =>
    span > 0 ? ((t - t0) / span) * width : width;
  const y = (v: number): number =>
    height - (Math.min(Math.max(v, 0), max) / max) * height;
  const round = (n: number): string => (Math.round(n * 10) / 10).toString();

  const line: string[] = [];
  const area: string[] = [];
  let run: Array<[number, number]> = [];
  const flush = (): void => {
    if (run.length === 0) {
      return;
    }
    if (run.length === 1) {
      // a lone point still shows: a short flat segment
      run.push([Math.min(run[0][0] + 1, width), run[0][1]]);
    }
    line.push(
      run
        .map(([px, py], i) => `${i ? 'L' : 'M'}${round(px)} ${round(py)}`)
        .join(' ')
    );
    area.push(
      `M${round(run[0][0])} ${height} ` +
        run.map(([px, py]) => `L${round(px)} ${round(py)}`).join(' ') +
        ` L${round(run[run.length - 1][0])} ${height} Z`
    );
    run = [];
  };
  for (const p of valid) {
    if (p.v === null || !Number.isFinite(p.v)) {
      flush();
    } else {
      run.push([x(p.t), y(p.v)]);
    }
  }
  flush();
  return { line: line.join(' '), area: area.join(' ') };
}

/** Open the TensorBoard of this server in a new browser tab. */
export function openTensorBoard(url: string): void {
  const target = /^(https?:)?\//.test(url)
    ? url
    : URLExt.join(PageConfig.getBaseUrl(), url);
  window.open(target, '_blank', 'noopener');
}

/**
 * Ask for confirmation, then stop this server through the hub (which stops billing).
 *
 * @returns whether the server is being stopped
 */
export async function stopServer(tr: ILocalizer): Promise<boolean> {
  const result = await showDialog({
    title: tr.__('Stop your server?'),
    body: tr.__(
      'This stops your JupyterLab server and all its kernels, and billing stops. Unsaved changes in open notebooks are lost: save them first. Your files stay.'
    ),
    buttons: [
      Dialog.cancelButton({ label: tr.__('Cancel') }),
      Dialog.warnButton({ label: tr.__('Stop my server') })
    ]
  });
  if (!result.button.accept) {
    return false;
  }
  try {
    await requestAPI<unknown>('stop', { method: 'POST' });
  } catch (error) {
    Notification.error(
      tr.__(
        'Could not stop your server: %1',
        (error as Error).message ?? String(error)
      ),
      { autoClose: false }
    );
    return false;
  }
  Notification.success(tr.__('Your server is stopping. Billing stops now.'), {
    autoClose: 5000
  });
  const hubPrefix = PageConfig.getOption('hubPrefix');
  if (hubPrefix) {
    // The server is going away: take the student back to the hub's home page.
    const home =
      PageConfig.getOption('hubHost') + URLExt.join(hubPrefix, 'home');
    window.setTimeout(() => window.location.assign(home), 3000);
  }
  return true;
}

/**
 * The gpu service's usage pages (sessions, spend, budgets) at the hub's
 * `/services/gpu/`, or null outside JupyterHub.
 */
export function usagePageUrl(): string | null {
  const hubPrefix = PageConfig.getOption('hubPrefix');
  if (!hubPrefix) {
    return null;
  }
  const base = hubPrefix.replace(/hub\/?$/, '');
  return PageConfig.getOption('hubHost') + URLExt.join(base, 'services/gpu/');
}

/** The side panel widget. */
export class GpuPanel extends Widget {
  constructor(options: GpuPanel.IOptions) {
    super();
    this._options = options;
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
      this._advice.update(stats, tr);
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
    this._advice = new AdviceView();
    this._reason = el('div', 'jp-gpu-Reason');
    this._reasonTitle = el('strong');
    this._reasonText = el('p');
    this._reason.append(this._reasonTitle, this._reasonText);

    this._charts = el('div', 'jp-gpu-Charts');
    this._utilChart = new Private.Chart('jp-gpu-Chart-util');
    this._memChart = new Private.Chart('jp-gpu-Chart-mem');
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
      this._advice.node,
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
    if (session) {
      rows.push([tr.__('Profile'), session.display_name || session.profile]);
      rows.push([
        tr.__('Cost so far'),
        tr.__(
          '%1 for %2',
          formatMoney(session.cost, session.currency_symbol, session.currency),
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
            session.currency
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
    const history = Private.historyWithNow(stats);
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
      start: Private.clock(util[0]?.t, tr),
      end: tr.__('now')
    });

    const memory = totalMemory(stats.gpus);
    const totalMiB =
      memory?.total ??
      Math.max(0, ...history.map(p => p.memory_total_mib ?? 0));
    const mem = history.map(p => ({ t: parseTime(p.t), v: p.memory_used_mib }));
    const peakMem = Math.max(0, ...mem.map(p => p.v ?? 0));
    this._memChart.update({
      title: tr.__('GPU memory'),
      caption: tr.__(
        'now %1 of %2 GB · peak %3 GB',
        formatGB(memory?.used),
        formatGB(totalMiB),
        formatGB(peakMem)
      ),
      paths: chartPaths(mem, totalMiB),
      top: tr.__('%1 GB', formatGB(totalMiB)),
      start: Private.clock(mem[0]?.t, tr),
      end: tr.__('now')
    });
  }

  private _renderGpus(stats: IStats, tr: ILocalizer): void {
    const items = stats.gpus.map(gpu => {
      const item = el('li');
      item.title = gpu.uuid;
      const figures = [
        tr.__('GPU %1', formatPercent(gpu.utilization_percent)),
        tr.__(
          '%1/%2 GB',
          formatGB(gpu.memory_used_mib),
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
        el('div', 'jp-gpu-GpuName', `${gpu.index}: ${gpu.name}`),
        el('div', 'jp-gpu-GpuFigures', figures.join(' · '))
      );
      return item;
    });
    this._gpuList.replaceChildren(...items);
  }

  private _options: GpuPanel.IOptions;
  private _title!: HTMLElement;
  private _badge!: HTMLElement;
  private _banner!: HTMLElement;
  private _summary!: HTMLElement;
  private _advice!: AdviceView;
  private _reason!: HTMLElement;
  private _reasonTitle!: HTMLElement;
  private _reasonText!: HTMLElement;
  private _charts!: HTMLElement;
  private _utilChart!: Private.Chart;
  private _memChart!: Private.Chart;
  private _gpuSection!: HTMLElement;
  private _gpuHeading!: HTMLElement;
  private _gpuList!: HTMLElement;
  private _tensorboard!: HTMLButtonElement;
  private _stop!: HTMLButtonElement;
  private _usage!: HTMLAnchorElement;
  private _footer!: HTMLElement;
}

/** GpuPanel statics. */
export namespace GpuPanel {
  /** What the panel needs. */
  export interface IOptions {
    model: StatsModel;
    localizer: () => ILocalizer;
    onStop: () => void;
    onOpenTensorBoard: (url: string) => void;
  }
}

/** Create an HTML element with a class and text. */
function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  text = ''
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text) {
    node.textContent = text;
  }
  return node;
}

namespace Private {
  /** What one chart shows. */
  export interface IChartView {
    title: string;
    caption: string;
    paths: { line: string; area: string };
    top: string;
    start: string;
    end: string;
  }

  /** One titled SVG chart with its axis labels. */
  export class Chart {
    constructor(className: string) {
      this.node = el('figure', `jp-gpu-Chart ${className}`);
      const head = el('figcaption');
      this._title = el('span', 'jp-gpu-Chart-title');
      this._caption = el('span', 'jp-gpu-Chart-caption');
      head.append(this._title, this._caption);

      const frame = el('div', 'jp-gpu-Chart-frame');
      const svg = document.createElementNS(SVG_NS, 'svg');
      svg.setAttribute('viewBox', `0 0 ${CHART_WIDTH} ${CHART_HEIGHT}`);
      svg.setAttribute('preserveAspectRatio', 'none');
      svg.setAttribute('role', 'img');
      for (const fraction of [0.25, 0.5, 0.75]) {
        const grid = document.createElementNS(SVG_NS, 'line');
        grid.setAttribute('class', 'jp-gpu-Chart-grid');
        grid.setAttribute('x1', '0');
        grid.setAttribute('x2', String(CHART_WIDTH));
        grid.setAttribute('y1', String(CHART_HEIGHT * fraction));
        grid.setAttribute('y2', String(CHART_HEIGHT * fraction));
        svg.appendChild(grid);
      }
      this._area = document.createElementNS(SVG_NS, 'path');
      this._area.setAttribute('class', 'jp-gpu-Chart-area');
      this._line = document.createElementNS(SVG_NS, 'path');
      this._line.setAttribute('class', 'jp-gpu-Chart-line');
      svg.append(this._area, this._line);
      this._svg = svg;
      this._top = el('span', 'jp-gpu-Chart-top');
      frame.append(svg, this._top);

      const axis = el('div', 'jp-gpu-Chart-axis');
      this._start = el('span');
      this._end = el('span');
      axis.append(this._start, this._end);
      this.node.append(head, frame, axis);
    }

    readonly node: HTMLElement;

    update(view: IChartView): void {
      this._title.textContent = view.title;
      this._caption.textContent = view.caption;
      this._svg.setAttribute('aria-label', `${view.title}: ${view.caption}`);
      this._line.setAttribute('d', view.paths.line);
      this._area.setAttribute('d', view.paths.area);
      this._top.textContent = view.top;
      this._start.textContent = view.start;
      this._end.textContent = view.end;
    }

    private _title: HTMLElement;
    private _caption: HTMLElement;
    private _svg: SVGSVGElement;
    private _line: SVGPathElement;
    private _area: SVGPathElement;
    private _top: HTMLElement;
    private _start: HTMLElement;
    private _end: HTMLElement;
  }

  /** The session's history, ending with the latest sample. */
  export function historyWithNow(stats: IStats): IHistoryPoint[] {
    const history = [...(stats.history ?? [])];
    const memory = totalMemory(stats.gpus);
    const last = history[history.length - 1];
    const sampledAt = stats.sampled_at;
    if (sampledAt && (!last || parseTime(last.t) < parseTime(sampledAt))) {
      history.push({
        t: sampledAt,
        utilization_percent: meanUtilization(stats.gpus),
        memory_used_mib: memory?.used ?? null,
        memory_total_mib: memory?.total ?? null
      });
    }
    return history;
  }

  /** A clock time for an axis label, e.g. "19:48". */
  export function clock(t: number | undefined, tr: ILocalizer): string {
    if (t === undefined || !Number.isFinite(t)) {
      return '';
    }
    return new Date(t).toLocaleTimeString(tr.language, {
      hour: '2-digit',
      minute: '2-digit'
    });
  }
}
