jest.mock('../handler', () => ({ requestAPI: jest.fn() }));

import { GpuStats } from '../gpustats';
import { StatsModel } from '../model';
import { DEFAULT_SETTINGS } from '../settings';

/** JupyterLab's translator, in Simplified Chinese, with no catalog of its own. */
const translator: any = {
  languageCode: 'zh-CN',
  load: () => ({ __: (msgid: string) => msgid })
};

function makeGpuStats(): GpuStats {
  const model = new StatsModel({
    fetch: () => new Promise(() => undefined),
    standby: 'never'
  });
  return new GpuStats({ translator, model });
}

describe('GpuStats', () => {
  it('starts with the defaults and JupyterLab language', () => {
    const stats = makeGpuStats();
    expect(stats.settings).toEqual(DEFAULT_SETTINGS);
    expect(stats.localizer().language).toBe('zh-CN');
    expect(stats.model.interval).toBe(DEFAULT_SETTINGS.pollInterval);
    stats.dispose();
    expect(stats.isDisposed).toBe(true);
  });

  it('takes new settings: language, poll interval, and says so', () => {
    const stats = makeGpuStats();
    const localizer = stats.localizer;
    const changed = jest.fn();
    stats.settingsChanged.connect(changed);
    stats.configure({
      ...DEFAULT_SETTINGS,
      pollInterval: 2000,
      language: 'en',
      showCost: false
    });
    expect(changed).toHaveBeenCalledTimes(1);
    expect(stats.settings.showCost).toBe(false);
    expect(stats.model.interval).toBe(2000);
    // the same function, now answering in the new language
    expect(stats.localizer).toBe(localizer);
    expect(localizer().language).toBe('en');
    expect(localizer().__('CPU only')).toBe('CPU only');
    stats.dispose();
  });
});
