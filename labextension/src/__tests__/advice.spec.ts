import { adviceText, AdviceView, type IAdvice, sessionAdvice } from '../advice';
import type { IStats } from '../types';
import { en, makeStats, zh } from './helpers';

function makeAdvice(overrides: Partial<IAdvice> = {}): IAdvice {
  return {
    final: false,
    profile: 'a100',
    suggested_profile: 't4',
    suggested_display_name: '1× T4',
    suggested_gpu_count: 1,
    suggested_rate_per_minute: '0.05',
    rate_per_minute: '0.25',
    confidence: 'high',
    gpu_count: 1,
    gpus_used: 1,
    peak_memory_mib: 3174,
    memory_total_mib: 40960,
    busy_percent: 12,
    currency: 'CNY',
    cost: '30',
    counterfactual_cost: '6',
    saving: '24',
    message: 'Peak 3.1 GB of 40 GB GPU memory, …',
    ...overrides
  };
}

function statsWith(advice: IAdvice | null): IStats {
  const stats = makeStats();
  return { ...stats, session: { ...stats.session!, advice } as any };
}

describe('adviceText', () => {
  it('says which profile would have served and what it would have cost, in English', () => {
    expect(adviceText(makeAdvice(), '¥', en)).toBe(
      'Peak 3.1 GB of 40.0 GB GPU memory, busy 12% of the time. The 1× T4 profile (¥0.05/min instead of ¥0.25/min) would very likely have served. So far this session would have cost ¥6.00 instead of ¥30.00.'
    );
  });

  it('says "1 GPU would have done" for a session that used one of two', () => {
    const text = adviceText(
      makeAdvice({
        gpu_count: 2,
        gpus_used: 1,
        rate_per_minute: '0.1',
        confidence: 'medium',
        final: true
      }),
      '¥',
      en
    );
    expect(text).toContain('1 of 2 GPUs did work');
    expect(text).toContain('1 GPU would have done.');
    expect(text).toContain('would likely have served');
    expect(text).toContain(
      'This session would have cost ¥6.00 instead of ¥30.00.'
    );
  });

  it('speaks Simplified Chinese', () => {
    expect(adviceText(makeAdvice(), '¥', zh)).toBe(
      'GPU 显存峰值 3.1 GB（共 40.0 GB），12% 的时间处于忙碌状态。1× T4 配置（每分钟 ¥0.05，而不是 ¥0.25）很可能就能满足需要。到目前为止，本次会话本可只花 ¥6.00，而不是 ¥30.00。'
    );
  });
});

describe('AdviceView', () => {
  it('is hidden without advice and shows the advice of the session', () => {
    const view = new AdviceView();
    view.update(makeStats(), en);
    expect(view.node.hidden).toBe(true);
    expect(sessionAdvice(makeStats())).toBeNull();

    view.update(statsWith(makeAdvice()), en);
    expect(view.node.hidden).toBe(false);
    expect(view.node.dataset.profile).toBe('t4');
    expect(view.node.textContent).toContain('A cheaper profile would do');
    expect(view.node.textContent).toContain('¥6.00 instead of ¥30.00');

    view.update(statsWith(makeAdvice()), zh);
    expect(view.node.textContent).toContain('更便宜的配置就够用');

    view.update(statsWith(null), en);
    expect(view.node.hidden).toBe(true);
  });
});
