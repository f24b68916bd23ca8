import {
  budgetText,
  costText,
  deviceLabel,
  gpuName,
  historyWithNow,
  meanUtilization,
  totalMemory
} from '../figures';
import { en, makeStats, zh } from './helpers';

describe('budgetText', () => {
  it('shows GPU-hour budgets in GPU-hours', () => {
    const session = {
      ...makeStats().session!,
      budget_unit: 'gpu_hours',
      budget_remaining: '12.500000'
    };
    expect(budgetText(session, en)).toBe('12.5 GPU-h left');
  });

  it('shows an overspent budget with its sign', () => {
    const session = { ...makeStats().session!, budget_remaining: '-1.2' };
    expect(budgetText(session, en)).toBe('-¥1.20 left');
  });
});

describe('deviceLabel', () => {
  it('falls back to the GPU name without a session', () => {
    expect(deviceLabel(makeStats({ session: null }), en)).toBe('Tesla T4');
  });
});

describe('gpuName', () => {
  it("writes a simulated GPU's name in the reader's language", () => {
    expect(gpuName('Simulated A100', true, zh)).toBe('模拟 A100');
    expect(gpuName('Simulated A100', true, en)).toBe('Simulated A100');
  });

  it('leaves real GPUs, and names that only look simulated, as the server wrote them', () => {
    expect(gpuName('NVIDIA A100-SXM4-40GB', false, zh)).toBe(
      'NVIDIA A100-SXM4-40GB'
    );
    expect(gpuName('Simulated A100', false, zh)).toBe('Simulated A100');
    expect(gpuName('Simulatedness', true, zh)).toBe('Simulatedness');
  });
});

describe('meanUtilization and totalMemory', () => {
  const gpu = makeStats().gpus[0];

  it('average and sum over the GPUs that report', () => {
    const gpus = [gpu, { ...gpu, utilization_percent: null, index: '1' }];
    expect(meanUtilization(gpus)).toBe(63);
    expect(meanUtilization([])).toBeNull();
    expect(totalMemory([gpu, gpu])).toEqual({ used: 20480, total: 30720 });
  });

  it('know no memory when a GPU does not report it, or without GPUs', () => {
    expect(totalMemory([gpu, { ...gpu, memory_used_mib: null }])).toBeNull();
    expect(totalMemory([])).toBeNull();
  });
});

describe('costText', () => {
  it('shows the cost and the billed minutes', () => {
    expect(costText(makeStats().session!, en)).toBe('¥0.60 (12 min)');
    // no symbol set by the admin: the reader's language writes it, as the service's pages do
    const plain = { ...makeStats().session!, currency_symbol: '' };
    expect(costText(plain, en)).toBe('CN¥0.60 (12 min)');
    expect(costText(plain, zh).startsWith('¥0.60')).toBe(true);
  });
});

describe('historyWithNow', () => {
  it('ends with the latest sample when it is newer than the history', () => {
    const history = historyWithNow(makeStats());
    expect(history).toHaveLength(2);
    expect(history[1]).toEqual({
      t: '2026-11-29T20:00:00Z',
      utilization_percent: 63,
      memory_used_mib: 10240,
      memory_total_mib: 15360
    });
  });

  it('adds nothing when the history has the sample already, or there is none', () => {
    const stats = makeStats();
    const upToDate = makeStats({
      history: [{ ...stats.history[0], t: stats.sampled_at! }]
    });
    expect(historyWithNow(upToDate)).toEqual(upToDate.history);
    expect(historyWithNow(makeStats({ sampled_at: null }))).toEqual(
      stats.history
    );
  });
});
