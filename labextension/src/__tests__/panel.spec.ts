// panel.ts imports JupyterLab ES modules for its dialogs and page config, which these tests do not use.
jest.mock('@jupyterlab/apputils', () => ({}));
const pageOptions: Record<string, string> = {};
jest.mock('@jupyterlab/coreutils', () => ({
  PageConfig: { getOption: (name: string) => pageOptions[name] ?? '' },
  URLExt: {
    join: (...parts: string[]) => parts.join('/').replace(/\/{2,}/g, '/')
  }
}));
jest.mock('../handler', () => ({ requestAPI: jest.fn() }));

import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { chartPaths, GpuPanel, usagePageUrl } from '../panel';
import type { IStats } from '../types';
import { en, makeStats } from './helpers';

describe('chartPaths', () => {
  it('draws time left to right and values bottom to top', () => {
    const { line, area } = chartPaths(
      [
        { t: 0, v: 0 },
        { t: 50, v: 50 },
        { t: 100, v: 100 }
      ],
      100,
      200,
      100
    );
    expect(line).toBe('M0 100 L100 50 L200 0');
    expect(area).toBe('M0 100 L0 100 L100 50 L200 0 L200 100 Z');
  });

  it('breaks the line at gaps and clamps values', () => {
    const { line } = chartPaths(
      [
        { t: 0, v: 150 },
        { t: 1, v: 10 },
        { t: 2, v: null },
        { t: 3, v: -5 },
        { t: 4, v: 20 }
      ],
      100,
      40,
      10
    );
    expect(line).toBe('M0 0 L10 9 M30 10 L40 8');
  });

  it('draws nothing without points or scale, and a stub for one point', () => {
    expect(chartPaths([], 100)).toEqual({ line: '', area: '' });
    expect(chartPaths([{ t: 0, v: 1 }], 0)).toEqual({ line: '', area: '' });
    expect(chartPaths([{ t: 5, v: 50 }], 100, 300, 80).line).toBe(
      'M300 40 L300 40'
    );
  });
});

describe('GpuPanel', () => {
  function mount(stats: IStats) {
    const model: any = { stats, stale: false, error: null, receivedAt: null };
    model.changed = new Signal(model);
    const onStop = jest.fn();
    const onOpenTensorBoard = jest.fn();
    const panel = new GpuPanel({
      model,
      localizer: () => en,
      onStop,
      onOpenTensorBoard
    });
    Widget.attach(panel, document.body);
    panel.render();
    const q = (selector: string) =>
      panel.node.querySelector(selector) as HTMLElement;
    return { panel, q, onStop, onOpenTensorBoard };
  }

  it('shows cost, budget, charts and GPUs, and says simulated', () => {
    const { panel, q } = mount(makeStats({ simulated: true }));
    expect(q('.jp-gpu-Badge').hidden).toBe(false);
    expect(q('.jp-gpu-Banner').textContent).toMatch(/Simulated GPUs/);
    const summary = q('.jp-gpu-Summary').textContent;
    expect(summary).toContain('¥0.60 for 12 min');
    expect(summary).toContain('¥0.05 per minute');
    expect(summary).toContain('¥87.40 left');
    expect(summary).toContain('about 1 d 5 h at this rate');
    expect(q('.jp-gpu-Charts').hidden).toBe(false);
    expect(
      q('.jp-gpu-Chart-util .jp-gpu-Chart-line').getAttribute('d')
    ).toMatch(/^M/);
    expect(q('.jp-gpu-GpuList').textContent).toContain('0: Tesla T4');
    expect(q('.jp-gpu-Reason').hidden).toBe(true);
    panel.dispose();
  });

  it('says why there are no GPU figures on a CPU-only server', () => {
    const { panel, q } = mount(
      makeStats({
        gpus: [],
        history: [],
        sampled_at: null,
        reason: 'No GPU is assigned to this server (CPU-only profile).'
      })
    );
    expect(q('.jp-gpu-Charts').hidden).toBe(true);
    expect(q('.jp-gpu-Gpus').hidden).toBe(true);
    expect(q('.jp-gpu-Reason').hidden).toBe(false);
    expect(q('.jp-gpu-Reason').textContent).toContain('CPU-only profile');
    expect(q('.jp-gpu-Badge').hidden).toBe(true);
    panel.dispose();
  });

  it('hides "Open TensorBoard" without a URL and wires both buttons', () => {
    const without = mount(makeStats());
    const buttons = without.panel.node.querySelectorAll(
      '.jp-gpu-Actions button'
    );
    expect((buttons[0] as HTMLElement).hidden).toBe(true);
    (buttons[1] as HTMLElement).click();
    expect(without.onStop).toHaveBeenCalled();
    without.panel.dispose();

    const withUrl = mount(
      makeStats({ tensorboard_url: '/user/alice/proxy/6006/' })
    );
    const tb = withUrl.panel.node.querySelector(
      '.jp-gpu-Actions button'
    ) as HTMLElement;
    expect(tb.hidden).toBe(false);
    expect(tb.textContent).toBe('Open TensorBoard');
    tb.click();
    expect(withUrl.onOpenTensorBoard).toHaveBeenCalledWith(
      '/user/alice/proxy/6006/'
    );
    withUrl.panel.dispose();
  });
});

describe('usagePageUrl', () => {
  afterEach(() => {
    delete pageOptions.hubPrefix;
    delete pageOptions.hubHost;
  });

  it("links the gpu service's pages next to the hub", () => {
    pageOptions.hubPrefix = '/jh/hub/';
    pageOptions.hubHost = 'https://gpu.example.edu';
    expect(usagePageUrl()).toBe('https://gpu.example.edu/jh/services/gpu/');
    pageOptions.hubPrefix = '/hub/';
    pageOptions.hubHost = '';
    expect(usagePageUrl()).toBe('/services/gpu/');
  });

  it('is absent outside JupyterHub', () => {
    expect(usagePageUrl()).toBeNull();
  });
});
