import {
  currencyParts,
  formatClock,
  formatDecimal,
  formatGB,
  formatMinutes,
  formatMoney,
  formatPercent,
  formatSeconds,
  isStale,
  STALE_FACTOR
} from '../format';
import { en, zh } from './helpers';

describe('formatMoney', () => {
  it.each([
    ['0.6', '¥0.60'],
    ['87.4', '¥87.40'],
    ['0.0333', '¥0.0333'],
    ['12', '¥12.00'],
    ['0', '¥0.00'],
    ['0.050000', '¥0.05'],
    ['1234567.5', '¥1,234,567.50'],
    ['007.10', '¥7.10'],
    ['-1.5', '-¥1.50'],
    ['-0.00', '¥0.00'],
    ['+3', '¥3.00']
  ])('formats %s as %s', (amount, expected) => {
    expect(formatMoney(amount, '¥', 'CNY')).toBe(expected);
  });

  it('never rounds: every digit of a long rate stays', () => {
    expect(formatMoney('0.016667', '$', 'USD')).toBe('$0.016667');
    expect(formatMoney('99999999999999.99', '$')).toBe(
      '$99,999,999,999,999.99'
    );
  });

  it('adds no minor digits for currencies without them', () => {
    expect(formatMoney('150', '¥', 'JPY')).toBe('¥150');
    expect(formatMoney('150.5', '₩', 'krw')).toBe('₩150.5');
  });

  it('lets the language write the symbol when the admin set none', () => {
    // the same Unicode CLDR data as the service's pages (Babel): CN¥ in English, ¥ in Chinese
    expect(formatMoney('0.6', '', 'CNY', 'en')).toBe('CN¥0.60');
    expect(formatMoney('0.6', '', 'CNY', 'zh-CN')).toBe('¥0.60');
    expect(formatMoney('-3', '', 'USD', 'zh-CN')).toBe('-US$3.00');
    expect(formatMoney('0.016667', '', 'USD', 'en')).toBe('$0.016667');
    expect(formatMoney('150', '', 'JPY', 'en')).toBe('¥150');
    expect(formatMoney('1.5', '', 'BHD', 'en')).toBe('BHD1.500');
    // an admin's symbol is used in every language
    expect(formatMoney('0.6', 'RMB ', 'CNY', 'zh-CN')).toBe('RMB 0.60');
    // a code the browser does not know is shown by its code
    expect(formatMoney('1', '', 'zz', 'en')).toBe('ZZ 1.00');
  });

  it('shows text that is not a decimal as it came', () => {
    expect(formatMoney('n/a', '¥')).toBe('¥n/a');
    expect(formatMoney('', '¥')).toBe('¥');
    expect(formatMoney('1e3', '¥')).toBe('¥1e3');
  });
});

describe('currencyParts', () => {
  it('gives the symbol and minor digits of a currency in a language', () => {
    expect(currencyParts('CNY', 'zh-CN')).toEqual({ symbol: '¥', digits: 2 });
    expect(currencyParts('cny', 'en')).toEqual({ symbol: 'CN¥', digits: 2 });
    expect(currencyParts('KRW', 'en')).toEqual({ symbol: '₩', digits: 0 });
  });
});

describe('formatDecimal', () => {
  it('keeps a plain number and rejects others', () => {
    expect(formatDecimal('12.5', 0)).toBe('12.5');
    expect(formatDecimal('12.000', 0)).toBe('12');
    expect(formatDecimal('.5')).toBe('0.50');
    expect(formatDecimal('.')).toBeNull();
    expect(formatDecimal('1.2.3')).toBeNull();
  });
});

describe('formatMinutes', () => {
  it.each([
    [0, '0 min'],
    [1, '1 min'],
    [12, '12 min'],
    [59, '59 min'],
    [60, '1 h 00 min'],
    [65, '1 h 05 min'],
    [1439, '23 h 59 min'],
    [1440, '1 d 0 h'],
    [1748, '1 d 5 h'],
    [12.9, '12 min'],
    [-3, '0 min']
  ])('formats %d minutes as "%s"', (minutes, expected) => {
    expect(formatMinutes(minutes, en)).toBe(expected);
  });

  it('speaks Simplified Chinese', () => {
    expect(formatMinutes(12, zh)).toBe('12 分钟');
    expect(formatMinutes(65, zh)).toBe('1 小时 05 分钟');
    expect(formatMinutes(1748, zh)).toBe('1 天 5 小时');
  });
});

describe('formatSeconds', () => {
  it('uses seconds under a minute, then minutes', () => {
    expect(formatSeconds(4.7, en)).toBe('4 s');
    expect(formatSeconds(180, en)).toBe('3 min');
    expect(formatSeconds(3900, en)).toBe('1 h 05 min');
  });
});

describe('formatPercent and formatGB', () => {
  it('rounds percentages and shows a dash when unknown', () => {
    expect(formatPercent(63.4)).toBe('63%');
    expect(formatPercent(99.5)).toBe('100%');
    expect(formatPercent(null)).toBe('–');
    expect(formatPercent(NaN)).toBe('–');
  });

  it('turns MiB into GB with one decimal', () => {
    expect(formatGB(10240)).toBe('10.0');
    expect(formatGB(15360)).toBe('15.0');
    expect(formatGB(10444)).toBe('10.2');
    expect(formatGB(null)).toBe('–');
  });
});

describe('isStale', () => {
  const sampled = Date.parse('2026-11-29T20:00:00Z');

  it('is fresh up to three sampling intervals', () => {
    expect(STALE_FACTOR).toBe(3);
    expect(isStale(sampled, 2, sampled)).toBe(false);
    expect(isStale(sampled, 2, sampled + 6000)).toBe(false);
    expect(isStale(sampled, 2, sampled + 6001)).toBe(true);
    expect(isStale(sampled, 10, sampled + 29_000)).toBe(false);
    expect(isStale(sampled, 10, sampled + 31_000)).toBe(true);
  });

  it('is fresh when the clock is a little behind the sample', () => {
    expect(isStale(sampled, 2, sampled - 900)).toBe(false);
  });

  it('is stale without a valid timestamp', () => {
    expect(isStale(NaN, 2, sampled)).toBe(true);
  });

  it('falls back to a 2 s interval when the server sends none', () => {
    expect(isStale(sampled, 0, sampled + 5000)).toBe(false);
    expect(isStale(sampled, NaN, sampled + 7000)).toBe(true);
  });
});

describe('formatClock', () => {
  it('gives hours and minutes in the language, nothing when unknown', () => {
    const t = Date.parse('2026-11-29T19:48:00Z');
    expect(formatClock(t, en)).toMatch(/^\d{2}:48( [AP]M)?$/);
    expect(formatClock(t, zh)).toMatch(/\d{2}:48$/);
    expect(formatClock(undefined, en)).toBe('');
    expect(formatClock(NaN, en)).toBe('');
  });
});
