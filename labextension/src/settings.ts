/**
 * The extension's settings (schema/plugin.json) as a typed, validated object. The language is
 * not one of them: it is JupyterLab's (Settings → Language), see i18n.ts.
 */
/** The user's settings for this extension. */
export interface ISettings {
  /** How often to ask the server for new figures, in ms (at least 1000). */
  pollInterval: number;
  showStatusBar: boolean;
  showUtilization: boolean;
  showMemory: boolean;
  showCost: boolean;
  showBudget: boolean;
}

/** The shortest poll interval the schema allows, in ms. */
export const MIN_POLL_INTERVAL = 1000;

/** The defaults; `schema/plugin.json` declares the same (a test checks it). */
export const DEFAULT_SETTINGS: Readonly<ISettings> = Object.freeze({
  pollInterval: 5000,
  showStatusBar: true,
  showUtilization: true,
  showMemory: true,
  showCost: true,
  showBudget: true
});

/**
 * Read settings from the registry's composite value, falling back to the defaults for any
 * missing or malformed entry.
 */
export function readSettings(
  composite: { readonly [key: string]: unknown } | null | undefined
): ISettings {
  const value = composite ?? {};
  const flag = (key: keyof ISettings): boolean => {
    const v = value[key];
    return typeof v === 'boolean' ? v : (DEFAULT_SETTINGS[key] as boolean);
  };
  const interval = value.pollInterval;
  return {
    pollInterval:
      typeof interval === 'number' && Number.isFinite(interval)
        ? Math.max(MIN_POLL_INTERVAL, Math.round(interval))
        : DEFAULT_SETTINGS.pollInterval,
    showStatusBar: flag('showStatusBar'),
    showUtilization: flag('showUtilization'),
    showMemory: flag('showMemory'),
    showCost: flag('showCost'),
    showBudget: flag('showBudget')
  };
}
