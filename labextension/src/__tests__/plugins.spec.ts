/**
 * The plugins of index.ts in a Lumino application with fake JupyterLab services: they
 * resolve each other through their tokens and add the same commands, items and panel as
 * the single plugin did before the plugins were split.
 */
/** A module of JupyterLab tokens (a function declaration: hoisted above the mocks). */
function mockTokens(...names: string[]): Record<string, unknown> {
  const { Token } = jest.requireActual('@lumino/coreutils');
  return Object.fromEntries(names.map(name => [name, new Token(name)]));
}
jest.mock('@jupyterlab/application', () => mockTokens('ILayoutRestorer'));
jest.mock('@jupyterlab/apputils', () => ({
  ...mockTokens('ICommandPalette'),
  Notification: {
    manager: { changed: { connect: () => true, disconnect: () => true } }
  }
}));
jest.mock('@jupyterlab/settingregistry', () => mockTokens('ISettingRegistry'));
jest.mock('@jupyterlab/statedb', () => mockTokens('IStateDB'));
jest.mock('@jupyterlab/statusbar', () => mockTokens('IStatusBar'));
jest.mock('@jupyterlab/translation', () => mockTokens('ITranslator'));
// gettext (the tests' catalog bundle) needs only the default language of its tokens module
jest.mock('@jupyterlab/translation/lib/tokens', () => ({
  DEFAULT_LANGUAGE_CODE: 'en'
}));
jest.mock('@jupyterlab/ui-components', () => ({
  LabIcon: class {
    constructor(options: object) {
      Object.assign(this, options);
    }
  }
}));
jest.mock('@jupyterlab/coreutils', () => ({
  PageConfig: { getOption: () => '', getBaseUrl: () => '/' },
  URLExt: { join: (...parts: string[]) => parts.join('/') }
}));
jest.mock('../handler', () => ({
  requestAPI: jest.fn((endPoint: string) =>
    endPoint === 'stop-when-done'
      ? Promise.resolve({
          data: {
            state: 'off',
            flagged_at: null,
            run_seen: false,
            busy_kernels: 0,
            deadline: null
          },
          serverTime: null
        })
      : new Promise(() => undefined)
  )
}));

import { ILayoutRestorer } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator } from '@jupyterlab/translation';
import { Application } from '@lumino/application';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { CommandIDs } from '../commands';
import { requestAPI } from '../handler';
import plugins from '../index';
import { IGpuStats } from '../tokens';
import { translatorIn } from './helpers';

class FakeShell extends Widget {
  add = jest.fn();
  activateById = jest.fn();
  currentWidget = null;
}

async function start(
  composite: Record<string, unknown> = {},
  languageCode = 'en'
) {
  const shell = new FakeShell();
  const app: any = new Application({ shell });
  app.restored = Promise.resolve();
  const opened = jest.fn();
  app.commands.addCommand('docmanager:open', { execute: opened });
  app.contextMenuHitTest = () => undefined;
  jest.spyOn(app.contextMenu, 'addItem');
  const statusBar = { registerStatusItem: jest.fn() };
  const palette = { addItem: jest.fn() };
  const restorer = { add: jest.fn() };
  const state = {
    fetch: jest.fn().mockResolvedValue(undefined),
    save: jest.fn().mockResolvedValue(undefined)
  };
  const changed = new Signal<unknown, void>({});
  const settings = { composite, changed };
  const registry = { load: jest.fn().mockResolvedValue(settings) };
  const translator = translatorIn(languageCode);
  const services: Array<[any, unknown]> = [
    [ITranslator, translator],
    [IStatusBar, statusBar],
    [ICommandPalette, palette],
    [ILayoutRestorer, restorer],
    [IStateDB, state],
    [ISettingRegistry, registry]
  ];
  for (const [token, service] of services) {
    app.registerPlugin({
      id: `fake:${token.name}`,
      provides: token,
      activate: () => service
    });
  }
  app.registerPlugins(plugins);
  for (const plugin of plugins) {
    await app.activatePlugin(plugin.id);
  }
  const stats: IGpuStats = await app.resolveRequiredService(IGpuStats);
  await new Promise(resolve => setTimeout(resolve, 0));
  return {
    app,
    opened,
    shell,
    statusBar,
    palette,
    restorer,
    registry,
    settings,
    stats
  };
}

describe('the plugins', () => {
  it("are named '<package>:<plugin>', the settings one as its schema", () => {
    expect(plugins.map(p => p.id).sort()).toEqual([
      'jupyterhub-gpu:jobs',
      'jupyterhub-gpu:notices',
      'jupyterhub-gpu:panel',
      'jupyterhub-gpu:plugin',
      'jupyterhub-gpu:stats',
      'jupyterhub-gpu:statusbar',
      'jupyterhub-gpu:stop-when-done'
    ]);
    expect(plugins.every(p => p.autoStart === true)).toBe(true);
  });

  it('add every command, in the palette under GPU', async () => {
    const { app, palette } = await start();
    const labels = Object.values(CommandIDs).map(id => app.commands.label(id));
    expect(labels).toEqual([
      'GPU: Show usage panel',
      'GPU: Stop my server (stop billing)',
      'GPU: Open TensorBoard',
      'GPU: Stop this server when the running cells finish',
      'Run notebook as a GPU job',
      'GPU: Show notebook jobs'
    ]);
    expect(
      palette.addItem.mock.calls.map(([item]) => item.command).sort()
    ).toEqual(Object.values(CommandIDs).sort());
    expect(
      palette.addItem.mock.calls.every(([item]) => item.category === 'GPU')
    ).toBe(true);
    expect(app.commands.isEnabled(CommandIDs.openTensorBoard)).toBe(false);
    expect(
      app.contextMenu.addItem.mock.calls.map(([item]: any) => item)
    ).toEqual([
      {
        command: CommandIDs.runJob,
        selector: '.jp-DirListing-item[data-file-type="notebook"]',
        rank: 20
      },
      { command: CommandIDs.runJob, selector: '.jp-Notebook', rank: 90 }
    ]);
  });

  it('put the panel on the right, with the advice box and the stop-when-done toggle', async () => {
    const { app, shell, restorer } = await start();
    expect(shell.add).toHaveBeenCalledTimes(1);
    const [panel, area, options] = shell.add.mock.calls[0];
    expect([panel.id, area, options]).toEqual([
      'jupyterhub-gpu-panel',
      'right',
      { rank: 900 }
    ]);
    expect(restorer.add).toHaveBeenCalledWith(panel, 'jupyterhub-gpu-panel');
    expect(panel.node.querySelector('.jp-gpu-Advice')).not.toBeNull();
    const toggle = panel.node.querySelector('.jp-gpu-StopWhenDone');
    expect(toggle.nextElementSibling.className).toBe('jp-gpu-Footer');
    await app.commands.execute(CommandIDs.showPanel);
    expect(shell.activateById).toHaveBeenCalledWith('jupyterhub-gpu-panel');
    expect(requestAPI).toHaveBeenCalledWith('stop-when-done');
  });

  it('register the two status bar items; the first opens the panel', async () => {
    const { shell, statusBar } = await start();
    const items = statusBar.registerStatusItem.mock.calls.map(([id, item]) => [
      id,
      item.align,
      item.rank
    ]);
    expect(items.sort()).toEqual([
      ['jupyterhub-gpu:status', 'left', 100],
      ['jupyterhub-gpu:stop-when-done', 'left', 101]
    ]);
    const [, status] = statusBar.registerStatusItem.mock.calls.find(
      ([id]) => id === 'jupyterhub-gpu:status'
    )!;
    expect(status.item.node.classList).toContain('jp-gpu-StatusItem');
    expect(status.isActive()).toBe(true);
    status.item.node.click();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(shell.activateById).toHaveBeenCalledWith('jupyterhub-gpu-panel');
  });

  it("load the settings of 'jupyterhub-gpu:plugin' into the shared stats, in JupyterLab's language", async () => {
    const { app, statusBar, registry, settings, stats } = await start(
      { pollInterval: 2000, showStatusBar: false },
      'zh-CN'
    );
    expect(registry.load).toHaveBeenCalledWith('jupyterhub-gpu:plugin');
    expect(stats.model.interval).toBe(2000);
    expect(stats.localizer().language).toBe('zh-CN');
    expect(app.commands.label(CommandIDs.showPanel)).not.toBe(
      'GPU: Show usage panel'
    );
    const [, status] = statusBar.registerStatusItem.mock.calls.find(
      ([id]) => id === 'jupyterhub-gpu:status'
    )!;
    expect(status.isActive()).toBe(false);
    const active = jest.fn();
    status.activeStateChanged.connect(active);
    settings.composite = { showStatusBar: true };
    settings.changed.emit();
    expect(status.isActive()).toBe(true);
    expect(active).toHaveBeenCalled();
    // the settings do not choose the language: JupyterLab's stays
    expect(stats.localizer().language).toBe('zh-CN');
    stats.model.dispose();
  });

  it('reopen the notebooks a restart on a bigger profile kept, once', async () => {
    window.localStorage.setItem(
      'jupyterhub-gpu:reopen',
      JSON.stringify(['work/train.ipynb', 'b.ipynb'])
    );
    const { opened, stats } = await start();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(opened.mock.calls.map(call => call[0])).toEqual([
      { path: 'work/train.ipynb' },
      { path: 'b.ipynb' }
    ]);
    expect(window.localStorage.getItem('jupyterhub-gpu:reopen')).toBeNull();
    stats.model.dispose();
    const again = await start();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(again.opened).not.toHaveBeenCalled();
    again.stats.model.dispose();
  });
});
