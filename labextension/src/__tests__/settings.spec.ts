import * as fs from 'fs';
import * as path from 'path';

import { DEFAULT_SETTINGS, MIN_POLL_INTERVAL, readSettings } from '../settings';

const schema = JSON.parse(
  fs.readFileSync(
    path.join(__dirname, '..', '..', 'schema', 'plugin.json'),
    'utf-8'
  )
);

describe('settings', () => {
  it('has the defaults the issue asks for', () => {
    expect(DEFAULT_SETTINGS).toEqual({
      pollInterval: 5000,
      showStatusBar: true,
      showUtilization: true,
      showMemory: true,
      showCost: true,
      showBudget: true
    });
  });

  it('declares the same defaults and properties in the schema', () => {
    const defaults = Object.fromEntries(
      Object.entries(schema.properties).map(([key, spec]) => [
        key,
        (spec as { default: unknown }).default
      ])
    );
    expect(defaults).toEqual(DEFAULT_SETTINGS);
    expect(schema.properties.pollInterval.minimum).toBe(MIN_POLL_INTERVAL);
    expect(schema.additionalProperties).toBe(false);
  });

  it('reads the defaults from an empty or missing composite', () => {
    expect(readSettings({})).toEqual(DEFAULT_SETTINGS);
    expect(readSettings(null)).toEqual(DEFAULT_SETTINGS);
  });

  it('keeps valid values and replaces malformed ones', () => {
    expect(
      readSettings({
        pollInterval: 2500,
        showStatusBar: false,
        showMemory: 'no',
        // the setting this extension once had: the language is JupyterLab's now
        language: 'zh-CN'
      })
    ).toEqual({
      ...DEFAULT_SETTINGS,
      pollInterval: 2500,
      showStatusBar: false
    });
    expect(readSettings({ pollInterval: 'fast' }).pollInterval).toBe(5000);
  });

  it('never polls faster than once a second', () => {
    expect(readSettings({ pollInterval: 10 }).pollInterval).toBe(1000);
    expect(readSettings({ pollInterval: 1234.6 }).pollInterval).toBe(1235);
  });
});
