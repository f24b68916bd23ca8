import * as fs from 'fs';
import * as path from 'path';

import {
  builtinCatalog,
  Localizer,
  makeLocalizer,
  serverText,
  strfmt
} from '../i18n';
import { ZH_CN } from '../zh_CN';

/** Every literal msgid passed to `tr.__(...)` in the sources. */
function sourceMsgids(): string[] {
  const dir = path.join(__dirname, '..');
  const ids = new Set<string>();
  for (const file of fs.readdirSync(dir)) {
    if (!file.endsWith('.ts') || file === 'zh_CN.ts') {
      continue;
    }
    const text = fs.readFileSync(path.join(dir, file), 'utf-8');
    for (const match of text.matchAll(/\btr\.__\(\s*'((?:[^'\\]|\\.)*)'/g)) {
      ids.add(match[1].replace(/\\'/g, "'"));
    }
  }
  return [...ids];
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

describe('the Simplified Chinese catalog', () => {
  it('translates every string of the sources', () => {
    const ids = sourceMsgids();
    expect(ids.length).toBeGreaterThan(50);
    expect(ids.filter(id => !(id in ZH_CN))).toEqual([]);
  });

  it('keeps the placeholders of each string', () => {
    for (const [id, text] of Object.entries(ZH_CN)) {
      expect([id, placeholders(text)]).toEqual([id, placeholders(id)]);
    }
  });

  it('is used for zh-CN and its aliases, not for Traditional Chinese', () => {
    for (const code of ['zh-CN', 'zh_CN', 'zh', 'zh-Hans', 'zh-SG']) {
      expect(builtinCatalog(code)).toBe(ZH_CN);
    }
    for (const code of ['zh-TW', 'zh-HK', 'en', 'fr-FR']) {
      expect(builtinCatalog(code)).toBeNull();
    }
  });
});

describe('Localizer', () => {
  const bundle = {
    __: jest.fn(
      (msgid: string, ...args: any[]) => `[${strfmt(msgid, ...args)}]`
    )
  };

  it('asks the built-in catalog first in Chinese', () => {
    const tr = new Localizer(bundle, 'zh-CN');
    expect(tr.__('%1 left', '¥1.00')).toBe('剩余 ¥1.00');
    expect(tr.__('Not in the catalog %1', 1)).toBe('[Not in the catalog 1]');
  });

  it('goes through the JupyterLab bundle in other languages', () => {
    expect(new Localizer(bundle, 'fr-FR').__('%1 left', 'x')).toBe('[x left]');
    expect(new Localizer(null, 'en').__('%1 left', 'x')).toBe('x left');
  });

  it("follows JupyterLab's language, the one source", () => {
    const translator = {
      languageCode: 'zh-CN',
      load: jest.fn(() => bundle)
    } as any;
    expect(makeLocalizer(translator).__('stale')).toBe('已过时');
    translator.languageCode = 'en';
    expect(makeLocalizer(translator).__('stale')).toBe('[stale]');
    expect(translator.load).toHaveBeenCalledWith('jupyterhub_gpu');
  });

  it('translates known server sentences and leaves others as they are', () => {
    const tr = new Localizer(null, 'zh-CN');
    expect(
      serverText('No GPU is assigned to this server (CPU-only profile).', tr)
    ).toBe('此服务器未分配 GPU（仅 CPU 配置）。');
    expect(serverText('NVML is unavailable: 100% broken %1', tr)).toBe(
      'NVML is unavailable: 100% broken %1'
    );
  });
});
