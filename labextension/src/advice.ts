/**
 * Right-sizing advice in the side panel: when the measured use of this session fits a
 * cheaper profile, say which one and what the session would have cost on it.
 *
 * The gpu service judges each running session after 30 minutes (then every few minutes)
 * and serves the advice with the session; the server extension passes it through the
 * stats answer as `session.advice`. The sentence is built here from the advice's figures,
 * so that it is translated like every other string of the panel.
 */
import { formatGB, formatMoney } from './format';
import type { ILocalizer } from './i18n';
import type { ISession, IStats } from './types';

/** The advice of a session, as the service serves it (money as decimal strings). */
export interface IAdvice {
  final: boolean;
  profile: string;
  suggested_profile: string;
  suggested_display_name: string;
  suggested_gpu_count: number;
  suggested_rate_per_minute: string;
  rate_per_minute: string;
  /** `"high"` (very likely) or `"medium"` (likely). */
  confidence: string;
  gpu_count: number;
  gpus_used: number;
  peak_memory_mib: number;
  memory_total_mib: number;
  busy_percent: number;
  currency: string;
  cost: string;
  counterfactual_cost: string;
  saving: string;
  message: string;
}

/** A session of the stats answer that may carry advice. */
export interface ISessionWithAdvice extends ISession {
  advice?: IAdvice | null;
}

/** The advice of the stats answer's session, or null. */
export function sessionAdvice(stats: IStats | null): IAdvice | null {
  const session = stats?.session as ISessionWithAdvice | null | undefined;
  const advice = session?.advice;
  return advice && advice.suggested_profile ? advice : null;
}

/**
 * The advice as sentences in the localizer's language, e.g. "Peak 3.1 GB of 40 GB GPU
 * memory, busy 12% of the time. The 1× T4 profile (¥0.05/min instead of ¥0.25/min)
 * would very likely have served. So far this session would have cost ¥6.00 instead of
 * ¥30.00."
 */
export function adviceText(
  advice: IAdvice,
  symbol: string,
  tr: ILocalizer
): string {
  const money = (amount: string): string =>
    formatMoney(amount, symbol, advice.currency, tr.language);
  const parts: string[] = [];
  const fewerGpus =
    advice.gpus_used < advice.gpu_count &&
    advice.suggested_gpu_count < advice.gpu_count;
  if (fewerGpus) {
    parts.push(
      tr.__(
        '%1 of %2 GPUs did work (peak %3 GB), busy %4%% of the time.',
        advice.gpus_used,
        advice.gpu_count,
        formatGB(advice.peak_memory_mib),
        advice.busy_percent
      ),
      tr._n(
        '%1 GPU would have done.',
        '%1 GPUs would have done.',
        advice.suggested_gpu_count
      )
    );
  } else {
    parts.push(
      tr.__(
        'Peak %1 GB of %2 GB GPU memory, busy %3%% of the time.',
        formatGB(advice.peak_memory_mib),
        formatGB(advice.memory_total_mib),
        advice.busy_percent
      )
    );
  }
  const name = advice.suggested_display_name || advice.suggested_profile;
  const rate = money(advice.suggested_rate_per_minute);
  const current = money(advice.rate_per_minute);
  parts.push(
    advice.confidence === 'high'
      ? tr.__(
          'The %1 profile (%2/min instead of %3/min) would very likely have served.',
          name,
          rate,
          current
        )
      : tr.__(
          'The %1 profile (%2/min instead of %3/min) would likely have served.',
          name,
          rate,
          current
        )
  );
  parts.push(
    advice.final
      ? tr.__(
          'This session would have cost %1 instead of %2.',
          money(advice.counterfactual_cost),
          money(advice.cost)
        )
      : tr.__(
          'So far this session would have cost %1 instead of %2.',
          money(advice.counterfactual_cost),
          money(advice.cost)
        )
  );
  return parts.join(tr.language.startsWith('zh') ? '' : ' ');
}

/** The panel's advice box: hidden while there is no advice. */
export class AdviceView {
  constructor() {
    this.node = document.createElement('div');
    this.node.className = 'jp-gpu-Advice';
    this.node.hidden = true;
    this._title = document.createElement('strong');
    this._text = document.createElement('p');
    this._hint = document.createElement('p');
    this._hint.className = 'jp-gpu-Advice-hint';
    this.node.append(this._title, this._text, this._hint);
  }

  readonly node: HTMLElement;

  /** Show the advice of `stats` (or hide the box). */
  update(stats: IStats | null, tr: ILocalizer): void {
    const advice = sessionAdvice(stats);
    this.node.hidden = advice === null;
    if (advice === null) {
      return;
    }
    this.node.dataset.profile = advice.suggested_profile;
    this._title.textContent = tr.__('A cheaper profile would do');
    this._text.textContent = adviceText(
      advice,
      stats?.session?.currency_symbol ?? '',
      tr
    );
    this._hint.textContent = tr.__(
      'Choose it when you next start a server: the advice is measured on this session.'
    );
  }

  private _title: HTMLElement;
  private _text: HTMLElement;
  private _hint: HTMLElement;
}
