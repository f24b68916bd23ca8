import { DEFAULT_SETTINGS, type ISettings } from '../settings';
import { statusText, statusTitle } from '../statusbar';
import { en, makeState, makeStats, zh } from './helpers';

const settings: ISettings = { ...DEFAULT_SETTINGS };

describe('statusText', () => {
  it('shows GPU, utilization, memory, cost and budget', () => {
    expect(statusText(makeState(makeStats()), settings, en)).toBe(
      'T4 · GPU 63% · 10.0/15.0 GB · ¥0.60 (12 min) · ¥87.40 left'
    );
  });

  it('says simulated when the GPUs are simulated', () => {
    const text = statusText(
      makeState(makeStats({ simulated: true })),
      settings,
      en
    );
    expect(text).toBe(
      'T4 (simulated) · GPU 63% · 10.0/15.0 GB · ¥0.60 (12 min) · ¥87.40 left'
    );
  });

  it('shows cost only on a CPU-only server', () => {
    const stats = makeStats({
      gpus: [],
      history: [],
      reason: 'No GPU is assigned to this server (CPU-only profile).'
    });
    expect(statusText(makeState(stats), settings, en)).toBe(
      'CPU only · ¥0.60 (12 min) · ¥87.40 left'
    );
    expect(
      statusText(makeState({ ...stats, simulated: true }), settings, en)
    ).toBe('CPU only (simulated) · ¥0.60 (12 min) · ¥87.40 left');
  });

  it('marks stale figures', () => {
    expect(
      statusText(makeState(makeStats(), { stale: true }), settings, en)
    ).toBe(
      'T4 · GPU 63% · 10.0/15.0 GB · ¥0.60 (12 min) · ¥87.40 left · stale'
    );
  });

  it('keeps the last figures, marked stale, when a poll fails', () => {
    const state = makeState(makeStats(), { stale: true, error: 'Not Found' });
    expect(statusText(state, settings, en)).toMatch(/ · stale$/);
  });

  it('says so before the first answer or when there is none', () => {
    expect(statusText(makeState(null), settings, en)).toBe('GPU …');
    expect(
      statusText(makeState(null, { error: 'Not Found' }), settings, en)
    ).toBe('GPU stats unavailable');
  });

  it('leaves out what the settings hide', () => {
    const hidden: ISettings = {
      ...settings,
      showUtilization: false,
      showMemory: false,
      showBudget: false
    };
    expect(statusText(makeState(makeStats()), hidden, en)).toBe(
      'T4 · ¥0.60 (12 min)'
    );
    expect(
      statusText(makeState(makeStats()), { ...settings, showCost: false }, en)
    ).toBe('T4 · GPU 63% · 10.0/15.0 GB · ¥87.40 left');
  });

  it('sums memory and averages utilization over several GPUs', () => {
    const gpu = makeStats().gpus[0];
    const stats = makeStats({
      gpus: [
        gpu,
        { ...gpu, index: '1', utilization_percent: 20, memory_used_mib: 0 }
      ]
    });
    expect(statusText(makeState(stats), settings, en)).toBe(
      '2× T4 · GPU 42% · 10.0/30.0 GB · ¥0.60 (12 min) · ¥87.40 left'
    );
  });

  it('leaves out cost and budget without a session, and budget without one', () => {
    expect(
      statusText(makeState(makeStats({ session: null })), settings, en)
    ).toBe('Tesla T4 · GPU 63% · 10.0/15.0 GB');
    const session = { ...makeStats().session!, budget_remaining: null };
    expect(statusText(makeState(makeStats({ session })), settings, en)).toBe(
      'T4 · GPU 63% · 10.0/15.0 GB · ¥0.60 (12 min)'
    );
  });

  it('speaks Simplified Chinese', () => {
    expect(
      statusText(makeState(makeStats({ simulated: true })), settings, zh)
    ).toBe(
      'T4（模拟） · GPU 63% · 10.0/15.0 GB · ¥0.60（12 分钟） · 剩余 ¥87.40'
    );
  });
});

describe('statusTitle', () => {
  it('says simulated, the error and the age', () => {
    const state = makeState(makeStats({ simulated: true }), {
      error: 'Bad Gateway',
      receivedAt: 1_000
    });
    expect(statusTitle(state, en, 13_000).split('\n')).toEqual([
      'Simulated GPUs: these figures are not from real hardware.',
      'Cannot reach the GPU stats: Bad Gateway',
      'Updated 12 s ago',
      'Click to show GPU usage and cost.'
    ]);
  });
});
