jest.mock('../handler', () => ({ requestAPI: jest.fn() }));

import { GpuStats } from '../gpustats';
import { StatsModel } from '../model';
import { DEFAULT_SETTINGS } from '../settings';
import { translatorIn } from './helpers';

/** JupyterLab's translator, in Simplified Chinese, with this extension's catalog. */
const translator = translatorIn('zh-CN');

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

  it("takes new settings (poll interval, parts) and says so; the language stays JupyterLab's", () => {
    const stats = makeGpuStats();
    const localizer = stats.localizer;
    const changed = jest.fn();
    stats.settingsChanged.connect(changed);
    stats.configure({
      ...DEFAULT_SETTINGS,
      pollInterval: 2000,
      showCost: false
    });
    expect(changed).toHaveBeenCalledTimes(1);
    expect(stats.settings.showCost).toBe(false);
    expect(stats.model.interval).toBe(2000);
    expect(stats.localizer).toBe(localizer);
    expect(localizer().language).toBe('zh-CN');
    expect(localizer().__('CPU only')).toBe('仅 CPU');
    stats.dispose();
  });
});
