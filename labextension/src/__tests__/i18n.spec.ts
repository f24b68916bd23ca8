import * as fs from 'fs';
import * as path from 'path';

import { Localizer, makeLocalizer, serverText, strfmt } from '../i18n';
import { catalogBundle, LOCALE, zh } from './helpers';

/** Every literal msgid passed to `tr.__(...)`, and every pair passed to `tr._n(...)`, in the sources. */
function sourceMsgids(): { singular: string[]; plural: string[][] } {
  const dir = path.join(__dirname, '..');
  const singular = new Set<string>();
  const plural: string[][] = [];
  const literal = "'((?:[^'\\\\]|\\\\.)*)'";
  const unquote = (s: string) => s.replace(/\\'/g, "'");
  for (const file of fs.readdirSync(dir)) {
    if (!file.endsWith('.ts')) {
      continue;
    }
    const text = fs.readFileSync(path.join(dir, file), 'utf-8');
    for (const m of text.matchAll(
      new RegExp(`\\btr\\.__\\(\\s*${literal}`, 'g')
    )) {
      singular.add(unquote(m[1]));
    }
    const pair = new RegExp(
      `\\btr\\._n\\(\\s*${literal}\\s*,\\s*${literal}`,
      'g'
    );
    for (const m of text.matchAll(pair)) {
      plural.push([unquote(m[1]), unquote(m[2])]);
    }
  }
  return { singular: [...singular], plural };
}

/** The catalogs there are: one folder a language, each with the extension's JSON. */
function labCatalogs(): string[] {
  return fs
    .readdirSync(LOCALE)
    .filter(lang =>
      fs.existsSync(
        path.join(LOCALE, lang, 'LC_MESSAGES', 'jupyterhub_gpu_lab.po')
      )
    );
}

/** The JSON the build compiled from a language's `jupyterhub_gpu_lab.po`. */
function compiled(lang: string): Record<string, string[]> {
  const file = path.join(LOCALE, lang, 'LC_MESSAGES', 'jupyterhub_gpu.json');
  return JSON.parse(fs.readFileSync(file, 'utf-8'));
}

const placeholders = (text: string): string[] =>
  [...text.matchAll(/%\d+/g)].map(m => m[0]).sort();

describe('strfmt', () => {
  it('fills placeholders like JupyterLab gettext', () => {
    expect(strfmt('%1 of %2', 'a', 3)).toBe('a of 3');
    expect(strfmt('GPU %1', '63%')).toBe('GPU 63%');
    expect(strfmt('100%% sure, %1', 'ok')).toBe('100% sure, ok');
    expect(strfmt('%2 missing', 'a')).toBe('%2 missing');
  });
});

describe("the extension's catalogs", () => {
  it('exist for Simplified Chinese at least', () => {
    expect(labCatalogs()).toContain('zh_CN');
  });

  it.each(labCatalogs())('%s translates every string of the sources', lang => {
    const data = compiled(lang);
    const { singular, plural } = sourceMsgids();
    expect(singular.length).toBeGreaterThan(50);
    expect(plural.length).toBeGreaterThan(0);
    // a singular has one form, a plural more (JupyterLab ignores an entry of the other kind)
    expect(singular.filter(id => data[id]?.length !== 1)).toEqual([]);
    expect(plural.filter(([one]) => !(data[one]?.length > 1))).toEqual([]);
  });

  it.each(labCatalogs())('%s keeps the placeholders of each string', lang => {
    for (const [id, forms] of Object.entries<string[]>(compiled(lang))) {
      if (id === '') {
        continue;
      }
      for (const form of forms.filter(f => f !== '')) {
        expect([id, placeholders(form)]).toEqual([id, placeholders(id)]);
      }
    }
  });
});

describe('Localizer', () => {
  it('answers in Chinese through the bundle of the catalog, plurals included', () => {
    expect(zh.__('%1 left', '¥1.00')).toBe('剩余 ¥1.00');
    expect(zh.__('Not in the catalog %1', 1)).toBe('Not in the catalog 1');
    expect(
      zh._n('%1 GPU would have done.', '%1 GPUs would have done.', 1)
    ).toBe('1 块 GPU 就够了。');
    expect(
      zh._n('%1 GPU would have done.', '%1 GPUs would have done.', 3)
    ).toBe('3 块 GPU 就够了。');
  });

  it('writes English without a bundle, with its plural forms', () => {
    const en = new Localizer(null, 'en');
    expect(en.__('%1 left', 'x')).toBe('x left');
    expect(
      en._n('%1 GPU would have done.', '%1 GPUs would have done.', 1)
    ).toBe('1 GPU would have done.');
    expect(
      en._n('%1 GPU would have done.', '%1 GPUs would have done.', 2)
    ).toBe('2 GPUs would have done.');
  });

  it("follows JupyterLab's language, the one source, through this domain's bundle", () => {
    const bundle = catalogBundle('zh_CN');
    const translator = {
      languageCode: 'zh-CN',
      load: jest.fn(() => bundle)
    } as any;
    expect(makeLocalizer(translator).__('stale')).toBe('已过时');
    expect(makeLocalizer(translator).language).toBe('zh-CN');
    expect(translator.load).toHaveBeenCalledWith('jupyterhub_gpu');
  });

  it('translates known server sentences and leaves others as they are', () => {
    expect(
      serverText('No GPU is assigned to this server (CPU-only profile).', zh)
    ).toBe('此服务器未分配 GPU（仅 CPU 配置）。');
    expect(serverText('NVML is unavailable: 100% broken %1', zh)).toBe(
      'NVML is unavailable: 100% broken %1'
    );
  });
});
