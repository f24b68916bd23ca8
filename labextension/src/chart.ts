/**
 * The side panel's charts: plain SVG, no chart library.
 *
 * `chartPaths` turns a time series into SVG path data (a pure function); `Chart` is one
 * titled chart whose skeleton is built once and whose paths and labels change on each
 * update, so nothing flickers.
 */
import { el } from './dom';

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
