/**
 * Translation: JupyterLab's translator for the "jupyterhub_gpu" domain.
 *
 * JupyterLab's language is the one source: it opens in the language the user chose for the
 * spawn (the server extension makes that its default, docs/user.md) and changes with
 * Settings → Language. The words are in the package's gettext catalogs
 * (`jupyterhub_gpu/locale/<lang>/LC_MESSAGES/jupyterhub_gpu_lab.po`), which the Python build
 * compiles to `jupyterhub_gpu.json` beside them; the package's `jupyterlab.locale` entry point
 * lets JupyterLab serve that JSON with the language's translations, so `translator.load()` of
 * this domain answers in the reader's language, plurals included. Adding a language is adding
 * its catalog (docs/translating.md).
 */
import type { ITranslator } from '@jupyterlab/translation';

/** The gettext domain of this extension's strings. */
export const DOMAIN = 'jupyterhub_gpu';

/** What views use to translate: `__()` and `_n()` with `%1`-style placeholders, like `trans`. */
export interface ILocalizer {
  /** The BCP 47 language in use, e.g. "en" or "zh-CN". */
  readonly language: string;
  /** Translate `msgid` and fill in `%1`, `%2`, …; `%%` is a literal percent sign. */
  __(msgid: string, ...args: Array<string | number>): string;
  /** The form of `msgid`/`msgid_plural` for the count `n`, which fills `%1` (`args` fill `%2`, …). */
  _n(
    msgid: string,
    msgid_plural: string,
    n: number,
    ...args: Array<string | number>
  ): string;
}

/** The part of a JupyterLab `TranslationBundle` that is used here. */
export interface IBundle {
  __(msgid: string, ...args: any[]): string;
  _n(msgid: string, msgid_plural: string, n: number, ...args: any[]): string;
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

/** An `ILocalizer` over JupyterLab's bundle of this domain (none: the English msgids). */
export class Localizer implements ILocalizer {
  constructor(bundle: IBundle | null, language: string) {
    this._bundle = bundle;
    this.language = language;
  }

  readonly language: string;

  __(msgid: string, ...args: Array<string | number>): string {
    return this._bundle
      ? this._bundle.__(msgid, ...args)
      : strfmt(msgid, ...args);
  }

  _n(
    msgid: string,
    msgid_plural: string,
    n: number,
    ...args: Array<string | number>
  ): string {
    return this._bundle
      ? this._bundle._n(msgid, msgid_plural, n, ...args)
      : strfmt(n === 1 ? msgid : msgid_plural, n, ...args);
  }

  private _bundle: IBundle | null;
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
