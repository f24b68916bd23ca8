/**
 * Plugin wiring only: each plugin makes its views, commands and items from the modules, and
 * they share one stats model through the `IGpuStats` token (`tokens.ts`).
 *
 * - `jupyterhub-gpu:stats` provides `IGpuStats`: the stats poll, settings and JupyterLab's language.
 * - `jupyterhub-gpu:plugin` loads the settings (`schema/plugin.json`; overrides.json keys
 *   name this id, so it stays) into `IGpuStats`.
 * - `jupyterhub-gpu:statusbar`, `:panel`, `:notices`, `:jobs` and `:stop-when-done` add
 *   the status bar item, the side panel with its commands (show it, stop the server, open
 *   TensorBoard), the notices, notebook jobs, and the "stop when done" flag (which
 *   provides `IStopWhenDoneModel` for the panel's toggle).
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

import { openTensorBoard, stopServer } from './actions';
import { AdviceView } from './advice';
import { openNotebooks, restartOnBigger, takeReopen } from './bigger';
import { addToPalette, CommandIDs } from './commands';
import { GpuStats } from './gpustats';
import { gpuIcon } from './icons';
import { jobNotebookPath, JobsWidget, runJobDialog } from './jobs';
import { NoticeCenter } from './notices';
import { GpuPanel } from './panel';
import { readSettings } from './settings';
import { GpuStatusItem } from './statusbar';
import { StopWhenDoneModel, StopWhenDoneToggle } from './stopwhendone';
import { IGpuStats, IStopWhenDoneModel } from './tokens';

const statsPlugin: JupyterFrontEndPlugin<IGpuStats> = {
  id: 'jupyterhub-gpu:stats',
  description:
    "The live GPU stats of this server (one poll), with the settings and JupyterLab's language every view uses.",
  autoStart: true,
  requires: [ITranslator],
  provides: IGpuStats,
  activate: (_app: JupyterFrontEnd, translator: ITranslator): IGpuStats =>
    // the command labels are in JupyterLab's language, which changes only with a reload
    new GpuStats({ translator })
};

const settingsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterhub-gpu:plugin',
  description:
    'The settings of the GPU usage and cost views (poll interval, status bar parts).',
  autoStart: true,
  requires: [IGpuStats],
  optional: [ISettingRegistry],
  activate: (
    _app: JupyterFrontEnd,
    stats: IGpuStats,
    settingRegistry: ISettingRegistry | null
  ): void => {
    if (!settingRegistry) {
      return;
    }
    settingRegistry
      .load(settingsPlugin.id)
      .then(loaded => {
        stats.configure(readSettings(loaded.composite));
        loaded.changed.connect(() =>
          stats.configure(readSettings(loaded.composite))
        );
      })
      .catch(reason => {
        console.error('jupyterhub-gpu: could not load the settings', reason);
      });
  }
};

const statusBarPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterhub-gpu:statusbar',
  description:
    'The status bar item: GPU, utilization, memory, cost and budget; a click opens the panel.',
  autoStart: true,
  requires: [IGpuStats],
  optional: [IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    stats: IGpuStats,
    statusBar: IStatusBar | null
  ): void => {
    if (!statusBar) {
      return;
    }
    const item = new GpuStatusItem({
      model: stats.model,
      settings: () => stats.settings,
      localizer: stats.localizer,
      onClick: () => void app.commands.execute(CommandIDs.showPanel)
    });
    stats.settingsChanged.connect(() => item.render());
    statusBar.registerStatusItem('jupyterhub-gpu:status', {
      item,
      align: 'left',
      rank: 100,
      isActive: () => stats.settings.showStatusBar,
      activeStateChanged: stats.settingsChanged
    });
  }
};

const panelPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterhub-gpu:panel',
  description:
    'The side panel (charts of GPU utilization and memory, cost, budget, advice) and its actions: stop the server, open TensorBoard.',
  autoStart: true,
  requires: [IGpuStats],
  optional: [ILayoutRestorer, ICommandPalette, IStopWhenDoneModel],
  activate: (
    app: JupyterFrontEnd,
    stats: IGpuStats,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    stopWhenDone: StopWhenDoneModel | null
  ): void => {
    const tr = stats.localizer;
    const panel = new GpuPanel({
      model: stats.model,
      localizer: tr,
      onStop: () => void app.commands.execute(CommandIDs.stopServer),
      onOpenTensorBoard: () =>
        void app.commands.execute(CommandIDs.openTensorBoard),
      sections: [new AdviceView()]
    });
    panel.title.icon = gpuIcon;
    app.shell.add(panel, 'right', { rank: 900 });
    restorer?.add(panel, panel.id);
    stats.settingsChanged.connect(() => panel.render());

    app.commands.addCommand(CommandIDs.showPanel, {
      label: () => tr().__('GPU: Show usage panel'),
      caption: () => tr().__('Show GPU usage and cost'),
      icon: gpuIcon,
      execute: () => app.shell.activateById(panel.id)
    });
    // the panel's actions, also in the palette
    const { model } = stats;
    app.commands.addCommand(CommandIDs.stopServer, {
      label: () => tr().__('GPU: Stop my server (stop billing)'),
      execute: () => stopServer(tr())
    });
    app.commands.addCommand(CommandIDs.openTensorBoard, {
      label: () => tr().__('GPU: Open TensorBoard'),
      isEnabled: () => !!model.stats?.tensorboard_url,
      execute: () => {
        const url = model.stats?.tensorboard_url;
        if (url) {
          openTensorBoard(url);
        }
      }
    });
    model.changed.connect(() =>
      app.commands.notifyCommandChanged(CommandIDs.openTensorBoard)
    );
    addToPalette(palette, [
      CommandIDs.showPanel,
      CommandIDs.stopServer,
      CommandIDs.openTensorBoard
    ]);

    if (stopWhenDone) {
      panel.addAction(
        new StopWhenDoneToggle({ model: stopWhenDone, localizer: tr }).node
      );
    }
  }
};

const noticesPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterhub-gpu:notices',
  description:
    'Notices from the gpu service (budget, idle stop, advice) as JupyterLab notifications.',
  autoStart: true,
  requires: [IGpuStats],
  optional: [IStateDB],
  activate: (
    app: JupyterFrontEnd,
    stats: IGpuStats,
    state: IStateDB | null
  ): void => {
    const notices = new NoticeCenter({
      localizer: stats.localizer,
      state,
      showPanel: () => void app.commands.execute(CommandIDs.showPanel),
      // the memory notice's button (docs/user.md)
      restartBigger: slug =>
        restartOnBigger(slug, {
          save: () => app.commands.execute('docmanager:save-all'),
          openPaths: () => openNotebooks(app)
        })
    });
    // after a restart on a bigger profile: reopen the notebooks it kept, once
    void app.restored.then(async () => {
      for (const path of takeReopen()) {
        await app.commands
          .execute('docmanager:open', { path })
          .catch(() => undefined);
      }
    });
    stats.model.changed.connect(
      () => void notices.update(stats.model.stats?.notices)
    );
  }
};

// "stop when done" and notebook jobs: docs/jobs.md
const stopWhenDonePlugin: JupyterFrontEndPlugin<StopWhenDoneModel> = {
  id: 'jupyterhub-gpu:stop-when-done',
  description:
    'Stop this server when the running cells finish: the flag, its command and status bar item.',
  autoStart: true,
  requires: [IGpuStats],
  optional: [IStatusBar, ICommandPalette],
  provides: IStopWhenDoneModel,
  activate: (
    app: JupyterFrontEnd,
    stats: IGpuStats,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null
  ): StopWhenDoneModel => {
    const tr = stats.localizer;
    const stopWhenDone = new StopWhenDoneModel({
      save: () => app.commands.execute('docmanager:save-all')
    });
    stopWhenDone.changed.connect(() =>
      app.commands.notifyCommandChanged(CommandIDs.stopWhenDone)
    );
    app.commands.addCommand(CommandIDs.stopWhenDone, {
      label: () =>
        tr().__('GPU: Stop this server when the running cells finish'),
      isToggled: () => stopWhenDone.enabled,
      execute: () => stopWhenDone.toggle()
    });
    addToPalette(palette, [CommandIDs.stopWhenDone]);
    statusBar?.registerStatusItem('jupyterhub-gpu:stop-when-done', {
      item: new StopWhenDoneToggle({
        model: stopWhenDone,
        localizer: tr,
        compact: true
      }),
      align: 'left',
      rank: 101
    });
    void stopWhenDone.refresh().catch(() => undefined);
    return stopWhenDone;
  }
};

const jobsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterhub-gpu:jobs',
  description:
    'Notebook jobs: "Run notebook as a GPU job" and the job list (state, duration, cost, output).',
  autoStart: true,
  requires: [IGpuStats],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    stats: IGpuStats,
    palette: ICommandPalette | null
  ): void => {
    const tr = stats.localizer;
    let jobsWidget: JobsWidget | null = null;
    app.commands.addCommand(CommandIDs.showJobs, {
      label: () => tr().__('GPU: Show notebook jobs'),
      execute: () => {
        if (!jobsWidget || jobsWidget.isDisposed) {
          jobsWidget = new JobsWidget({ localizer: tr });
          jobsWidget.title.icon = gpuIcon;
        }
        if (!jobsWidget.isAttached) {
          app.shell.add(jobsWidget, 'main');
        }
        app.shell.activateById(jobsWidget.id);
      }
    });
    app.commands.addCommand(CommandIDs.runJob, {
      label: () => tr().__('Run notebook as a GPU job'),
      execute: async args => {
        const path = jobNotebookPath(
          args.path,
          () =>
            app.contextMenuHitTest(node =>
              node.classList.contains('jp-DirListing-item')
            ) ?? null,
          app.shell.currentWidget
        );
        const job = await runJobDialog(path, tr());
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
    addToPalette(palette, [CommandIDs.runJob, CommandIDs.showJobs]);
  }
};

const plugins: JupyterFrontEndPlugin<any>[] = [
  statsPlugin,
  settingsPlugin,
  statusBarPlugin,
  panelPlugin,
  noticesPlugin,
  stopWhenDonePlugin,
  jobsPlugin
];

export default plugins;
