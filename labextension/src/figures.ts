/**
 * The figures of a stats answer that several views show: the device label, the mean
 * utilization, the memory over all GPUs, the cost and budget texts, and the history up
 * to the latest sample.
 *
 * Pure functions of the stats answer (and the localizer for texts); the status bar and the
 * side panel both build on them, so they say the same thing.
 */
import {
  formatDecimal,
  formatGB,
  formatMinutes,
  formatMoney,
  formatPercent,
  parseTime
} from './format';
import type { ILocalizer } from './i18n';
import type { IGpu, IHistoryPoint, ISession, IStats } from './types';

/**
 * The GPU label: "T4", "2× A100", "1/4 T4" (a share), "A100 MIG 1g.10gb" (a MIG slice) or
 * "CPU only"; tagged "(simulated)" when simulated.
 */
export function deviceLabel(stats: IStats, tr: ILocalizer): string {
  const gpus = stats.gpus ?? [];
  let label: string;
  if (gpus.length === 0) {
    label = tr.__('CPU only');
  } else {
    const model = stats.session?.gpu_model || gpus[0].name;
    const unit = sharedUnit(gpus);
    if (unit && isMig(unit)) {
      label = /\bMIG\b/.test(model)
        ? model
        : `${model} MIG ${migProfile(unit)}`;
    } else if (unit) {
      label = `${unit.share} ${model}`;
    } else {
      label = gpus.length > 1 ? tr.__('%1× %2', gpus.length, model) : model;
    }
  }
  return stats.simulated ? tr.__('%1 (simulated)', label) : label;
}

/** The GPU that is a share or a MIG slice (a profile of one unit), or null on whole GPUs. */
export function sharedUnit(gpus: IGpu[]): IGpu | null {
  return (gpus ?? []).find(gpu => !!gpu.share) ?? null;
}

/** Whether a unit is a MIG slice (`share` "mig:1g.10gb"). */
export function isMig(gpu: IGpu): boolean {
  return (gpu.share ?? '').startsWith('mig');
}

/** A MIG slice's profile ("1g.10gb"), "" when unknown. */
export function migProfile(gpu: IGpu): string {
  return (gpu.share ?? '').replace(/^mig:?/, '');
}

/**
 * Whether a GPU's memory in use is a measurement: the server says `memory_known: false`
 * where it cannot attribute memory to its own processes (in a container), and sends 0.
 */
export function memoryKnown(gpu: IGpu): boolean {
  return gpu.memory_known !== false;
}

/** Memory in use in GB ("3.1"), or "?" where it cannot be measured (null). */
export function usedGB(mib: number | null | undefined): string {
  return mib === null ? '?' : formatGB(mib);
}

/** The tooltip of a GPU whose own memory cannot be measured here. */
export function memoryUnknownTitle(gpu: IGpu, tr: ILocalizer): string {
  return gpu.share
    ? tr.__(
        'Your own GPU memory cannot be measured inside this container: the driver names processes by the host’s ids. The cap of %1 GB still applies to your kernels.',
        formatGB(gpu.memory_total_mib)
      )
    : tr.__(
        'Your own GPU memory cannot be measured inside this container: the driver names processes by the host’s ids.'
      );
}

/**
 * A share's or slice's own memory: "your share: 3.1 of 4.0 GB" ("your MIG slice: …");
 * "your share: ? of 4.0 GB" where it cannot be measured.
 */
export function ownMemoryText(gpu: IGpu, tr: ILocalizer): string {
  const used = memoryKnown(gpu) ? formatGB(gpu.memory_used_mib) : '?';
  const cap = formatGB(gpu.memory_total_mib);
  return isMig(gpu)
    ? tr.__('your MIG slice: %1 of %2 GB', used, cap)
    : tr.__('your share: %1 of %2 GB', used, cap);
}

/**
 * How busy a shared GPU is: "GPU busy 40% (shared by 3)"; where the driver gives no
 * utilization per process (scope "gpu") the figure is the whole GPU's and says so: "GPU busy
 * 40% (whole GPU, shared by 3)". A MIG slice's compute is its own: "GPU 45%".
 */
export function gpuBusyText(gpu: IGpu, tr: ILocalizer): string {
  if (isMig(gpu)) {
    return tr.__('GPU %1', formatPercent(gpu.utilization_percent));
  }
  const busy = formatPercent(
    typeof gpu.gpu_utilization_percent === 'number'
      ? gpu.gpu_utilization_percent
      : gpu.utilization_percent
  );
  const by = gpu.shared_by;
  const known = typeof by === 'number' && by > 0;
  if (gpu.scope === 'gpu') {
    return known
      ? tr.__('GPU busy %1 (whole GPU, shared by %2)', busy, by)
      : tr.__('GPU busy %1 (whole GPU)', busy);
  }
  return known
    ? tr.__('GPU busy %1 (shared by %2)', busy, by)
    : tr.__('GPU busy %1 (shared)', busy);
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

/**
 * Memory used and total over all GPUs in MiB, or null when unknown; `used` is null where
 * some GPU's memory cannot be measured here (`memory_known: false`), never its 0.
 */
export function totalMemory(
  gpus: IGpu[]
): { used: number | null; total: number } | null {
  let used: number | null = 0;
  let total = 0;
  for (const gpu of gpus) {
    if (typeof gpu.memory_total_mib !== 'number') {
      return null;
    }
    if (!memoryKnown(gpu)) {
      used = null;
    } else if (typeof gpu.memory_used_mib !== 'number') {
      return null;
    } else if (used !== null) {
      used += gpu.memory_used_mib;
    }
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
