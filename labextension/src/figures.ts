/**
 * The figures of a stats answer that several views show: the device label, the mean
 * utilization, the memory over all GPUs, the cost and budget texts, and the history up
 * to the latest sample.
 *
 * Pure functions of the stats answer (and the localizer for texts); the status bar and the
 * side panel both build on them, so they say the same thing.
 */
import { formatDecimal, formatMinutes, formatMoney, parseTime } from './format';
import type { ILocalizer } from './i18n';
import type { IGpu, IHistoryPoint, ISession, IStats } from './types';

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

/**
 * A GPU's name as the panel lists it: the server names a simulated one "Simulated T4" (in
 * English, for every reader); here it is written in the reader's language.
 */
export function gpuName(
  name: string,
  simulated: boolean,
  tr: ILocalizer
): string {
  const match = simulated ? /^Simulated\s+(.+)$/.exec(name) : null;
  return match ? tr.__('Simulated %1', match[1]) : name;
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
    formatMoney(
      session.cost,
      session.currency_symbol,
      session.currency,
      tr.language
    ),
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
    formatMoney(
      remaining,
      session.currency_symbol,
      session.currency,
      tr.language
    )
  );
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
