/**
 * Plugin wiring: the stats model, status bar item, side panel, notices, commands and settings.
 */
import {
  ILayoutRestorer,
  type JupyterFrontEnd,
  type JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator } from '@jupyterlab/translation';
import { Signal } from '@lumino/signaling';

import { type ILocalizer, makeLocalizer } from './i18n';
import { gpuIcon } from './icons';
import { JobsWidget, notebookPathFromItem, runJobDialog } from './jobs';
import { StatsModel } from './model';
import { NoticeCenter } from './notices';
import { GpuPanel, openTensorBoard, stopServer } from './panel';
import { DEFAULT_SETTINGS, type ISettings, readSettings } from './settings';
import { GpuStatusItem } from './statusbar';
import { StopWhenDoneModel, StopWhenDoneToggle } from './stopwhendone';

/** The extension's command ids. */
export namespace CommandIDs {
  export const showPanel = 'jupyterhub-gpu:show-panel';
  export const stopServer = 'jupyterhub-gpu:stop-server';
  export const openTensorBoard = 'jupyterhub-gpu:open-tensorboard';
  export const stopWhenDone = 'jupyterhub-gpu:stop-when-done';
  export const runJob = 'jupyterhub-gpu:run-job';
  export const showJobs = 'jupyterhub-gpu:show-jobs';
}

const PLUGIN_ID = 'jupyterhub-gpu:plugin';

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'Live GPU usage and session cost: a status bar item, a side panel and notices from the gpu service.',
  autoStart: true,
  requires: [ITranslator],
  optional: [
    IStatusBar,
    ISettingRegistry,
    ICommandPalette,
    IStateDB,
    ILayoutRestorer
  ],
  activate: (
    app: JupyterFrontEnd,
    translator: ITranslator,
    statusBar: IStatusBar | null,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null,
    state: IStateDB | null,
    restorer: ILayoutRestorer | null
  ): void => {
    let settings: ISettings = { ...DEFAULT_SETTINGS };
    let tr: ILocalizer = makeLocalizer(translator, settings.language);
    const localizer = (): ILocalizer => tr;
    const settingsChanged = new Signal<unknown, void>(plugin);

    const model = new StatsModel({ interval: settings.pollInterval });

    const panel = new GpuPanel({
      model,
      localizer,
      onStop: () => void app.commands.execute(CommandIDs.stopServer),
      onOpenTensorBoard: () =>
        void app.commands.execute(CommandIDs.openTensorBoard)
    });
    panel.title.icon = gpuIcon;
    app.shell.add(panel, 'right', { rank: 900 });
    restorer?.add(panel, panel.id);

    app.commands.addCommand(CommandIDs.showPanel, {
      label: () => tr.__('GPU: Show usage panel'),
      caption: () => tr.__('Show GPU usage and cost'),
      icon: gpuIcon,
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CommandIDs.stopServer, {
      label: () => tr.__('GPU: Stop my server (stop billing)'),
      execute: () => stopServer(tr)
    });
    app.commands.addCommand(CommandIDs.openTensorBoard, {
      label: () => tr.__('GPU: Open TensorBoard'),
      isEnabled: () => !!model.stats?.tensorboard_url,
      execute: () => {
        const url = model.stats?.tensorboard_url;
        if (url) {
          openTensorBoard(url);
        }
      }
    });

    // "stop when done" and notebook jobs (docs/jobs.md)
    const stopWhenDone = new StopWhenDoneModel({
      save: () => app.commands.execute('docmanager:save-all')
    });
    stopWhenDone.changed.connect(() =>
      app.commands.notifyCommandChanged(CommandIDs.stopWhenDone)
    );
    app.commands.addCommand(CommandIDs.stopWhenDone, {
      label: () => tr.__('GPU: Stop this server when the running cells finish'),
      isToggled: () => stopWhenDone.enabled,
      execute: () => stopWhenDone.toggle()
    });
    panel.addAction(
      new StopWhenDoneToggle({ model: stopWhenDone, localizer }).node
    );
    void stopWhenDone.refresh().catch(() => undefined);
    let jobsWidget: JobsWidget | null = null;
    app.commands.addCommand(CommandIDs.showJobs, {
      label: () => tr.__('GPU: Show notebook jobs'),
      execute: () => {
        if (!jobsWidget || jobsWidget.isDisposed) {
          jobsWidget = new JobsWidget({ localizer });
          jobsWidget.title.icon = gpuIcon;
        }
        if (!jobsWidget.isAttached) {
          app.shell.add(jobsWidget, 'main');
        }
        app.shell.activateById(jobsWidget.id);
      }
    });
    app.commands.addCommand(CommandIDs.runJob, {
      label: () => tr.__('Run notebook as a GPU job'),
      execute: async args => {
        let path = typeof args.path === 'string' ? args.path : null;
        if (!path) {
          const item = app.contextMenuHitTest(node =>
            node.classList.contains('jp-DirListing-item')
          );
          path = notebookPathFromItem(item ?? null);
        }
        if (!path) {
          const current = app.shell.currentWidget as any;
          const candidate = current?.context?.path;
          path =
            typeof candidate === 'string' && candidate.endsWith('.ipynb')
              ? candidate
              : '';
        }
        const job = await runJobDialog(path, tr);
        if (job) {
          void app.commands.execute(CommandIDs.showJobs);
        }
      }
    });
    app.contextMenu.addItem({
      command: CommandIDs.runJob,
      selector: '.jp-DirListing-item[data-file-type="notebook"]',
      rank: 20
    });
    app.contextMenu.addItem({
      command: CommandIDs.runJob,
      selector: '.jp-Notebook',
      rank: 90
    });

    if (palette) {
      const category = 'GPU';
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category });
      }
    }

    let statusItem: GpuStatusItem | null = null;
    if (statusBar) {
      statusItem = new GpuStatusItem({
        model,
        settings: () => settings,
        localizer,
        onClick: () => void app.commands.execute(CommandIDs.showPanel)
      });
      statusBar.registerStatusItem('jupyterhub-gpu:status', {
        item: statusItem,
        align: 'left',
        rank: 100,
        isActive: () => settings.showStatusBar,
        activeStateChanged: settingsChanged
      });
      statusBar.registerStatusItem('jupyterhub-gpu:stop-when-done', {
        item: new StopWhenDoneToggle({
          model: stopWhenDone,
          localizer,
          compact: true
        }),
        align: 'left',
        rank: 101
      });
    }

    const notices = new NoticeCenter({
      localizer,
      state,
      showPanel: () => void app.commands.execute(CommandIDs.showPanel)
    });
    model.changed.connect(() => {
      void notices.update(model.stats?.notices);
      app.commands.notifyCommandChanged(CommandIDs.openTensorBoard);
    });

    const apply = (composite: { readonly [key: string]: unknown }): void => {
      settings = readSettings(composite);
      tr = makeLocalizer(translator, settings.language);
      model.interval = settings.pollInterval;
      statusItem?.render();
      panel.render();
      app.commands.notifyCommandChanged();
      settingsChanged.emit();
    };
    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(loaded => {
          apply(loaded.composite);
          loaded.changed.connect(() => apply(loaded.composite));
        })
        .catch(reason => {
          console.error('jupyterhub-gpu: could not load the settings', reason);
        });
    }
  }
};

export default plugin;
