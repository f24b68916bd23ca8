/**
 * Translation: JupyterLab's translator for the "jupyterhub_gpu" domain, plus a built-in
 * Simplified Chinese catalog.
 *
 * JupyterLab's language is the one source: it opens in the language the user chose for the
 * spawn (the server extension makes that its default, docs/user.md) and changes with
 * Settings → Language. JupyterLab serves translations only for locales that have a language
 * pack installed, and a language pack covers only the domains it ships. So the Chinese
 * strings of this extension live in the bundle itself (`zh_CN.ts`): when JupyterLab's
 * language is Simplified Chinese, the built-in catalog answers first; every other case goes
 * through `trans.__()` of the "jupyterhub_gpu" domain, so a language pack that does ship
 * this domain still works.
 */
import type { ITranslator } from '@jupyterlab/translation';

import { ZH_CN } from './zh_CN';

/** The gettext domain of this extension's strings. */
export const DOMAIN = 'jupyterhub_gpu';

/** What views use to translate: `__()` with `%1`-style placeholders, like `trans.__()`. */
export interface ILocalizer {
  /** The BCP 47 language in use, e.g. "en" or "zh-CN". */
  readonly language: string;
  /** Translate `msgid` and fill in `%1`, `%2`, …; `%%` is a literal percent sign. */
  __(msgid: string, ...args: Array<string | number>): string;
}

/** The part of a JupyterLab `TranslationBundle` that is used here. */
export interface IBundle {
  __(msgid: string, ...args: any[]): string;
}

/**
 * Fill `%1`, `%2`, … with `args`, as JupyterLab's gettext does (`%%` stays a single `%`).
 */
export function strfmt(fmt: string, ...args: Array<string | number>): string {
  return fmt
    .replace(/%%/g, '%% ')
    .replace(/%(\d+)/g, (whole, n: string) => {
      const value = args[Number(n) - 1];
      return value === undefined ? whole : String(value);
    })
    .replace(/%% /g, '%');
}

/** The built-in catalog for a language code, or null when there is none. */
export function builtinCatalog(
  language: string
): Readonly<Record<string, string>> | null {
  const code = language.replace('_', '-').toLowerCase();
  // Simplified Chinese; zh-TW and zh-HK use Traditional characters and are not covered.
  if (['zh', 'zh-cn', 'zh-sg', 'zh-hans', 'zh-hans-cn'].includes(code)) {
    return ZH_CN;
  }
  return null;
}

/** An `ILocalizer` over an optional JupyterLab bundle and the built-in catalogs. */
export class Localizer implements ILocalizer {
  constructor(bundle: IBundle | null, language: string) {
    this._bundle = bundle;
    this.language = language;
    this._catalog = builtinCatalog(language);
  }

  readonly language: string;

  __(msgid: string, ...args: Array<string | number>): string {
    const translated = this._catalog?.[msgid];
    if (translated !== undefined) {
      return strfmt(translated, ...args);
    }
    if (this._bundle) {
      return this._bundle.__(msgid, ...args);
    }
    return strfmt(msgid, ...args);
  }

  private _bundle: IBundle | null;
  private _catalog: Readonly<Record<string, string>> | null;
}

/**
 * Translate a message written by the server (a known sentence such as the CPU-only
 * reason); unknown text comes back unchanged, `%` signs included.
 */
export function serverText(text: string, tr: ILocalizer): string {
  return tr.__(text.replace(/%/g, '%%'));
}

/**
 * The localizer for JupyterLab's language (fixed while the page lives: JupyterLab reloads
 * to change it).
 */
export function makeLocalizer(translator: ITranslator): Localizer {
  return new Localizer(translator.load(DOMAIN), translator.languageCode);
}
