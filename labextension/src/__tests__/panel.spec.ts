// panel.ts loads actions.ts, which imports JupyterLab ES modules for its dialogs and page config.
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

import { GpuPanel } from '../panel';
import type { IStats } from '../types';
import { en, makeStats } from './helpers';

describe('GpuPanel', () => {
  function mount(stats: IStats, sections: GpuPanel.ISection[] = []) {
    const model: any = { stats, stale: false, error: null, receivedAt: null };
    model.changed = new Signal(model);
    const onStop = jest.fn();
    const onOpenTensorBoard = jest.fn();
    const panel = new GpuPanel({
      model,
      localizer: () => en,
      onStop,
      onOpenTensorBoard,
      sections
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

  it('shows the sections the wiring gives between the summary and the charts', () => {
    const node = document.createElement('div');
    node.className = 'jp-gpu-Advice';
    const update = jest.fn();
    const stats = makeStats();
    const { panel } = mount(stats, [{ node, update }]);
    const order = [...panel.node.children].map(child => child.className);
    expect(order.indexOf('jp-gpu-Advice')).toBe(
      order.indexOf('jp-gpu-Summary') + 1
    );
    expect(order.indexOf('jp-gpu-Reason')).toBe(
      order.indexOf('jp-gpu-Advice') + 1
    );
    expect(update).toHaveBeenLastCalledWith(stats, en);
    panel.dispose();
  });
});
