/**
 * The extension's command ids, shared by the plugins that add the commands and those that
 * run them (the status bar opens the panel, the panel's buttons stop the server), and the
 * one way the plugins put them in the command palette.
 */
import type { ICommandPalette } from '@jupyterlab/apputils';

/** The extension's command ids. */
export namespace CommandIDs {
  export const showPanel = 'jupyterhub-gpu:show-panel';
  export const stopServer = 'jupyterhub-gpu:stop-server';
  export const openTensorBoard = 'jupyterhub-gpu:open-tensorboard';
  export const stopWhenDone = 'jupyterhub-gpu:stop-when-done';
  export const runJob = 'jupyterhub-gpu:run-job';
  export const showJobs = 'jupyterhub-gpu:show-jobs';
}

/** The command palette's category of every command above. */
export const PALETTE_CATEGORY = 'GPU';

/** Add commands to the palette (when there is one), under `PALETTE_CATEGORY`. */
export function addToPalette(
  palette: ICommandPalette | null,
  commands: readonly string[]
): void {
  for (const command of commands) {
    palette?.addItem({ command, category: PALETTE_CATEGORY });
  }
}
