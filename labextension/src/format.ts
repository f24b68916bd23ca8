/**
 * Pure text formatting: money, durations, clock times, percentages, memory and staleness.
 *
 * Money arrives as decimal strings ("0.6", "0.0333") and is formatted by rewriting the
 * string, never through floating-point numbers, so what the student sees is exactly what
 * the ledger holds.
 */
import type { ILocalizer } from './i18n';

/** Data sampled longer ago than this many sampling intervals is stale. */
export const STALE_FACTOR = 3;

const DECIMAL_RE = /^([+-])?(\d*)(?:\.(\d*))?$/;

/**
 * Format a decimal string with thousands separators and at least `minDigits` decimals.
 *
 * Extra decimals are kept (a rate of "0.0333" stays "0.0333"), trailing zeros beyond
 * `minDigits` are dropped ("0.050000" becomes "0.05"), nothing is ever rounded.
 * Returns null when `amount` is not a plain decimal number.
 */
export function formatDecimal(amount: string, minDigits = 2): string | null {
  const match = DECIMAL_RE.exec(amount.trim());
  if (!match || (match[2] === '' && (match[3] ?? '') === '')) {
    return null;
  }
  const negative = match[1] === '-';
  const whole = match[2].replace(/^0+(?=\d)/, '') || '0';
  let fraction = (match[3] ?? '').replace(/0+$/, '');
  if (fraction.length < minDigits) {
    fraction = fraction.padEnd(minDigits, '0');
  }
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  const isZero = /^0*$/.test(whole + fraction);
  const sign = negative && !isZero ? '-' : '';
  return sign + grouped + (fraction ? '.' + fraction : '');
}

/**
 * The symbol and minor-unit digits of a currency in a language, as the browser's Unicode CLDR data
 * writes them (the service's pages use the same data through Babel): CNY is "CN¥" in English and
 * "¥" in Chinese, USD "$" and "US$". An unknown code gives its code and two digits.
 */
export function currencyParts(
  currency: string,
  language = 'en'
): { symbol: string; digits: number } {
  try {
    const format = new Intl.NumberFormat(language || 'en', {
      style: 'currency',
      currency: currency.toUpperCase()
    });
    const symbol =
      format.formatToParts(0).find(part => part.type === 'currency')?.value ??
      currency;
    return {
      symbol,
      digits: format.resolvedOptions().maximumFractionDigits ?? 2
    };
  } catch {
    return { symbol: currency ? currency.toUpperCase() + ' ' : '', digits: 2 };
  }
}

/**
 * Format an amount of money: `("0.6", "¥")` gives "¥0.60", `("-1.5", "¥")` gives "-¥1.50".
 *
 * @param amount the decimal string from the API
 * @param symbol the admin's currency symbol; "" lets the language choose (CNY: "CN¥" in English, "¥" in Chinese)
 * @param currency the ISO code, which decides the number of minor digits (its CLDR digits: 0 for JPY)
 * @param language the BCP 47 language of the reader (`ILocalizer.language`)
 */
export function formatMoney(
  amount: string,
  symbol: string,
  currency = '',
  language = 'en'
): string {
  const parts = currency ? currencyParts(currency, language) : null;
  const digits = parts ? parts.digits : 2;
  const shown = symbol || (parts ? parts.symbol : '');
  const text = formatDecimal(amount, digits);
  if (text === null) {
    return shown + amount;
  }
  return text.startsWith('-') ? '-' + shown + text.slice(1) : shown + text;
}

/**
 * Format a whole number of minutes: "12 min", "1 h 05 min", "2 d 3 h".
 */
export function formatMinutes(minutes: number, tr: ILocalizer): string {
  const total = Math.max(0, Math.floor(minutes));
  if (total < 60) {
    return tr.__('%1 min', total);
  }
  const hours = Math.floor(total / 60);
  const rest = total % 60;
  if (hours < 24) {
    return tr.__('%1 h %2 min', hours, String(rest).padStart(2, '0'));
  }
  return tr.__('%1 d %2 h', Math.floor(hours / 24), hours % 24);
}

/**
 * Format a duration in seconds for "updated … ago": "4 s", "3 min", "1 h 05 min".
 */
export function formatSeconds(seconds: number, tr: ILocalizer): string {
  const total = Math.max(0, Math.floor(seconds));
  if (total < 60) {
    return tr.__('%1 s', total);
  }
  return formatMinutes(total / 60, tr);
}

/** Format a percentage as a whole number: 63.4 gives "63%"; unknown gives "–". */
export function formatPercent(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return '–';
  }
  return `${Math.round(value)}%`;
}

/** Format MiB as GB with one decimal (10240 gives "10.0"); unknown gives "–". */
export function formatGB(mib: number | null | undefined): string {
  if (mib === null || mib === undefined || !Number.isFinite(mib)) {
    return '–';
  }
  return (mib / 1024).toFixed(1);
}

/** A clock time (ms since the epoch) for an axis label, e.g. "19:48"; unknown gives "". */
export function formatClock(t: number | undefined, tr: ILocalizer): string {
  if (t === undefined || !Number.isFinite(t)) {
    return '';
  }
  return new Date(t).toLocaleTimeString(tr.language, {
    hour: '2-digit',
    minute: '2-digit'
  });
}

/** Parse an ISO 8601 timestamp to ms since the epoch; NaN when it is not one. */
export function parseTime(value: string | null | undefined): number {
  return value ? Date.parse(value) : NaN;
}

/**
 * Whether data sampled at `sampledAt` is stale at `now`: older than 3× the sampling interval.
 *
 * Both times must come from one clock (the server's, see `requestAPI`). Data with no valid
 * timestamp is stale.
 */
export function isStale(
  sampledAt: number,
  intervalSeconds: number,
  now: number
): boolean {
  if (!Number.isFinite(sampledAt)) {
    return true;
  }
  const interval =
    Number.isFinite(intervalSeconds) && intervalSeconds > 0
      ? intervalSeconds
      : 2;
  return now - sampledAt > STALE_FACTOR * interval * 1000;
}
