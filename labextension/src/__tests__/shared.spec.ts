// panel.ts loads actions.ts, which imports JupyterLab ES modules for its dialogs and page config.
jest.mock('@jupyterlab/apputils', () => ({}));
jest.mock('@jupyterlab/coreutils', () => ({
  PageConfig: { getOption: () => '' },
  URLExt: {
    join: (...parts: string[]) => parts.join('/').replace(/\/{2,}/g, '/')
  }
}));
jest.mock('../handler', () => ({ requestAPI: jest.fn() }));

import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import {
  deviceLabel,
  gpuBusyText,
  ownMemoryText,
  totalMemory
} from '../figures';
import { GpuPanel, sharedFigures } from '../panel';
import { DEFAULT_SETTINGS } from '../settings';
import { statusText, statusTitle } from '../statusbar';
import type { IGpu, IStats } from '../types';
import { en, makeState, makeStats, zh } from './helpers';

/** A server on share 1 of 4 of a simulated T4, as the stats API answers (gpus/shared_sim.py). */
function shareGpu(overrides: Partial<IGpu> = {}): IGpu {
  return {
    index: '0',
    uuid: 'GPU-1/share-1-of-4',
    name: 'Simulated T4',
    utilization_percent: 45,
    memory_used_mib: 3174,
    memory_total_mib: 4096,
    temperature_c: 50,
    power_w: 120,
    share: '1/4',
    scope: 'own',
    gpu_utilization_percent: 40,
    gpu_memory_used_mib: 9000,
    gpu_memory_total_mib: 16384,
    shared_by: 3,
    processes: 1,
    ...overrides
  };
}

function shareStats(gpu: Partial<IGpu> = {}, extra: Partial<IStats> = {}) {
  return makeStats({ simulated: true, gpus: [shareGpu(gpu)], ...extra });
}

describe('a shared GPU in the status bar', () => {
  it('shows your share of the memory and how busy the GPU is', () => {
    expect(statusText(makeState(shareStats()), DEFAULT_SETTINGS, en)).toBe(
      '1/4 T4 (simulated) · your share: 3.1 of 4.0 GB · GPU busy 40% (shared by 3) · ¥0.60 (12 min) · ¥87.40 left'
    );
  });

  it('says the figure is the whole GPU’s where the driver gives none per process', () => {
    const gpu = shareGpu({
      scope: 'gpu',
      utilization_percent: 40,
      gpu_utilization_percent: 40,
      shared_by: null
    });
    expect(gpuBusyText(gpu, en)).toBe('GPU busy 40% (whole GPU)');
    expect(gpuBusyText({ ...gpu, shared_by: 2 }, en)).toBe(
      'GPU busy 40% (whole GPU, shared by 2)'
    );
    expect(gpuBusyText({ ...gpu, scope: 'own' }, en)).toBe(
      'GPU busy 40% (shared)'
    );
    const state = makeState(shareStats({ scope: 'gpu' }));
    expect(statusTitle(state, en, 0)).toContain(
      'the utilization is the whole GPU’s, the others’ included.'
    );
  });

  it('speaks Simplified Chinese', () => {
    expect(statusText(makeState(shareStats()), DEFAULT_SETTINGS, zh)).toBe(
      '1/4 T4（模拟） · 你的份额：3.1 / 4.0 GB · GPU 忙碌 40%（3 人共用） · ¥0.60（12 分钟） · 剩余 ¥87.40'
    );
    expect(gpuBusyText(shareGpu({ scope: 'gpu', shared_by: null }), zh)).toBe(
      'GPU 忙碌 40%（整块 GPU）'
    );
  });

  it('hides what the settings hide, and says simulated and shared in the tooltip', () => {
    const settings = {
      ...DEFAULT_SETTINGS,
      showUtilization: false,
      showCost: false,
      showBudget: false
    };
    expect(statusText(makeState(shareStats()), settings, en)).toBe(
      '1/4 T4 (simulated) · your share: 3.1 of 4.0 GB'
    );
    const title = statusTitle(makeState(shareStats()), en, 0).split('\n');
    expect(title[0]).toBe(
      'Simulated GPUs: these figures are not from real hardware.'
    );
    expect(title[1]).toMatch(
      /^A share of a GPU: the memory figures are your own/
    );
  });

  it('leaves whole GPUs as they were', () => {
    expect(statusText(makeState(makeStats()), DEFAULT_SETTINGS, en)).toBe(
      'T4 · GPU 63% · 10.0/15.0 GB · ¥0.60 (12 min) · ¥87.40 left'
    );
  });
});

describe('a MIG slice', () => {
  const mig = {
    uuid: 'MIG-1',
    name: 'NVIDIA A100-SXM4-40GB MIG 1g.10gb',
    share: 'mig:1g.10gb',
    memory_used_mib: 1024,
    memory_total_mib: 9856,
    utilization_percent: 45,
    shared_by: null
  };

  it('is its own: memory and compute', () => {
    const stats = makeStats({
      gpus: [shareGpu(mig)],
      session: { ...makeStats().session!, gpu_model: 'A100' }
    });
    expect(deviceLabel(stats, en)).toBe('A100 MIG 1g.10gb');
    expect(ownMemoryText(stats.gpus[0], en)).toBe(
      'your MIG slice: 1.0 of 9.6 GB'
    );
    expect(statusText(makeState(stats), DEFAULT_SETTINGS, en)).toBe(
      'A100 MIG 1g.10gb · your MIG slice: 1.0 of 9.6 GB · GPU 45% · ¥0.60 (12 min) · ¥87.40 left'
    );
    expect(sharedFigures(stats.gpus[0], zh)).toEqual([
      '你的 MIG 分区：1.0 / 9.6 GB',
      'GPU 45%'
    ]);
  });
});

describe('a shared GPU in the panel', () => {
  it('lists your memory, your use and the GPU’s, and the share in the summary', () => {
    const model: any = {
      stats: shareStats(),
      stale: false,
      error: null,
      receivedAt: null
    };
    model.changed = new Signal(model);
    const panel = new GpuPanel({
      model,
      localizer: () => en,
      onStop: jest.fn(),
      onOpenTensorBoard: jest.fn()
    });
    Widget.attach(panel, document.body);
    panel.render();
    const q = (selector: string) =>
      panel.node.querySelector(selector) as HTMLElement;
    expect(q('.jp-gpu-GpuList').textContent).toContain(
      'your share: 3.1 of 4.0 GB · your use 45% · GPU busy 40% (shared by 3)'
    );
    expect(q('.jp-gpu-GpuList').textContent).toContain('0: Simulated T4');
    const summary = q('.jp-gpu-Summary').textContent;
    expect(summary).toContain('1/4 T4 (simulated)');
    expect(summary).toContain(
      '1/4 of the GPU: 4.0 GB memory cap, compute shared'
    );
    expect(q('.jp-gpu-Badge').hidden).toBe(false);
    panel.dispose();
  });
});

describe('own memory not measurable in a container (memory_known false)', () => {
  // the server cannot attribute memory to its processes and sends 0: no measurement
  const unmeasured = { memory_known: false, memory_used_mib: 0 };
  const tooltip =
    'Your own GPU memory cannot be measured inside this container: the driver names processes by the host’s ids. The cap of 4.0 GB still applies to your kernels.';

  function renderPanel(stats: IStats, tr = en) {
    const model: any = { stats, stale: false, error: null, receivedAt: null };
    model.changed = new Signal(model);
    const panel = new GpuPanel({
      model,
      localizer: () => tr,
      onStop: jest.fn(),
      onOpenTensorBoard: jest.fn()
    });
    Widget.attach(panel, document.body);
    panel.render();
    return panel;
  }

  it('says "?" in the status bar, never a measured 0, and why in the tooltip', () => {
    const state = makeState(shareStats(unmeasured));
    expect(statusText(state, DEFAULT_SETTINGS, en)).toBe(
      '1/4 T4 (simulated) · your share: ? of 4.0 GB · GPU busy 40% (shared by 3) · ¥0.60 (12 min) · ¥87.40 left'
    );
    expect(statusText(state, DEFAULT_SETTINGS, zh)).toContain(
      '你的份额：? / 4.0 GB'
    );
    expect(statusTitle(state, en, 0).split('\n')).toContain(tooltip);
    // memory_known true or absent: as before
    expect(
      statusText(
        makeState(shareStats({ memory_known: true })),
        DEFAULT_SETTINGS,
        en
      )
    ).toContain('your share: 3.1 of 4.0 GB');
    expect(statusTitle(makeState(shareStats()), en, 0)).not.toContain(
      'cannot be measured'
    );
  });

  it('on a whole GPU too: "?/15.0 GB"', () => {
    const stats = makeStats();
    stats.gpus[0] = { ...stats.gpus[0], ...unmeasured };
    expect(totalMemory(stats.gpus)).toEqual({ used: null, total: 15360 });
    expect(statusText(makeState(stats), DEFAULT_SETTINGS, en)).toBe(
      'T4 · GPU 63% · ?/15.0 GB · ¥0.60 (12 min) · ¥87.40 left'
    );
  });

  it('shows no 0 in the panel: "?" in the list, "not measurable here" on the chart, with the tooltip', () => {
    const stats = shareStats(unmeasured, {
      history: [
        {
          t: '2026-11-29T19:59:58Z',
          utilization_percent: 40,
          memory_used_mib: 0,
          memory_total_mib: 4096
        }
      ]
    });
    const panel = renderPanel(stats);
    const q = (selector: string) =>
      panel.node.querySelector(selector) as HTMLElement;
    const figures = q('.jp-gpu-GpuFigures');
    expect(figures.textContent).toContain('your share: ? of 4.0 GB');
    expect(figures.textContent).not.toContain('0.0 of');
    expect(figures.title).toBe(tooltip);
    const chart = q('.jp-gpu-Chart-mem');
    expect(chart.querySelector('.jp-gpu-Chart-caption')!.textContent).toBe(
      'not measurable here'
    );
    expect(chart.title).toBe(tooltip);
    expect(chart.querySelector('.jp-gpu-Chart-line')!.getAttribute('d')).toBe(
      ''
    );
    panel.dispose();

    const zhPanel = renderPanel(stats, zh);
    const zhChart = zhPanel.node.querySelector(
      '.jp-gpu-Chart-mem'
    ) as HTMLElement;
    expect(zhChart.querySelector('.jp-gpu-Chart-caption')!.textContent).toBe(
      '此处无法测量'
    );
    expect(zhChart.title).toBe(
      '在此容器内无法测量你自己的 GPU 显存：驱动程序按宿主机的进程 ID 标识进程。4.0 GB 的显存上限仍对你的内核有效。'
    );
    zhPanel.dispose();
  });

  it('leaves a measured share’s chart as it was', () => {
    const panel = renderPanel(shareStats());
    const chart = panel.node.querySelector('.jp-gpu-Chart-mem') as HTMLElement;
    expect(chart.textContent).toContain('now 3.1 of 4.0 GB');
    expect(chart.title).toBe('');
    expect(
      (panel.node.querySelector('.jp-gpu-GpuFigures') as HTMLElement).title
    ).toBe('');
    panel.dispose();
  });
});
