/**
 * Test helpers: a stats answer like the server's, and English/Chinese localizers.
 */
import * as fs from 'fs';
import * as path from 'path';

import { Gettext } from '@jupyterlab/translation/lib/gettext';

import { DOMAIN, Localizer } from '../i18n';
import type { IStatsState } from '../model';
import type { IStats } from '../types';

/** The folder of the package's catalogs (the Python build compiles each `*_lab.po` to JSON there). */
export const LOCALE = path.resolve(__dirname, '../../../jupyterhub_gpu/locale');

/**
 * The bundle JupyterLab makes for this domain in `locale` (e.g. "zh_CN"): its own Gettext, loaded
 * with the JSON the build compiled, as `TranslationManager.load()` does.
 */
export function catalogBundle(locale: string): Gettext {
  const file = path.join(LOCALE, locale, 'LC_MESSAGES', 'jupyterhub_gpu.json');
  if (!fs.existsSync(file)) {
    throw new Error(
      `${file} is missing: run "make catalogs" (it compiles the .po files)`
    );
  }
  const data = JSON.parse(fs.readFileSync(file, 'utf-8'));
  const language = locale.replace('_', '-');
  const bundle = new Gettext({ domain: DOMAIN, locale: language });
  bundle.loadJSON(
    { ...data, '': { ...data[''], pluralForms: data[''].plural_forms } },
    DOMAIN
  );
  return bundle;
}

export const en = new Localizer(null, 'en');
export const zh = new Localizer(catalogBundle('zh_CN'), 'zh-CN');

/** JupyterLab's translator in a language: this domain's bundle from the catalog, or English's. */
export function translatorIn(languageCode: string): any {
  return {
    languageCode,
    load: () =>
      languageCode === 'en'
        ? new Gettext({ domain: DOMAIN })
        : catalogBundle(languageCode.replace('-', '_'))
  };
}

/** The example answer of the stats API, with overrides. */
export function makeStats(overrides: Partial<IStats> = {}): IStats {
  return {
    simulated: false,
    reason: null,
    sampled_at: '2026-11-29T20:00:00Z',
    interval_seconds: 2,
    gpus: [
      {
        index: '0',
        uuid: 'GPU-1',
        name: 'Tesla T4',
        utilization_percent: 63,
        memory_used_mib: 10240,
        memory_total_mib: 15360,
        temperature_c: 51,
        power_w: 38.5
      }
    ],
    history: [
      {
        t: '2026-11-29T19:59:58Z',
        utilization_percent: 60,
        memory_used_mib: 10000,
        memory_total_mib: 15360
      }
    ],
    session: {
      id: 's1',
      profile: 't4',
      display_name: '1× T4',
      gpu_model: 'T4',
      started: '2026-11-29T19:48:00Z',
      rate_per_minute: '0.05',
      currency: 'CNY',
      currency_symbol: '¥',
      minutes_billed: 12,
      cost: '0.6',
      budget_remaining: '87.4',
      budget_unit: 'money',
      budget_minutes_left: 1748
    },
    notices: [],
    service_available: true,
    tensorboard_url: null,
    ...overrides
  };
}

/** A model state around a stats answer. */
export function makeState(
  stats: IStats | null,
  extra: Partial<IStatsState> = {}
): IStatsState {
  return { stats, stale: false, error: null, receivedAt: null, ...extra };
}
