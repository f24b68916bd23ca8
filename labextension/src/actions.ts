/**
 * What the student can do to their server from the Lab: open its TensorBoard, stop it (and
 * so stop billing), and find the gpu service's usage pages on the hub.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';

import { requestAPI } from './handler';
import type { ILocalizer } from './i18n';

/** Open the TensorBoard of this server in a new browser tab. */
export function openTensorBoard(url: string): void {
  const target = /^(https?:)?\//.test(url)
    ? url
    : URLExt.join(PageConfig.getBaseUrl(), url);
  window.open(target, '_blank', 'noopener');
}

/**
 * Ask for confirmation, then stop this server through the hub (which stops billing).
 *
 * @returns whether the server is being stopped
 */
export async function stopServer(tr: ILocalizer): Promise<boolean> {
  const result = await showDialog({
    title: tr.__('Stop your server?'),
    body: tr.__(
      'This stops your JupyterLab server and all its kernels, and billing stops. Unsaved changes in open notebooks are lost: save them first. Your files stay.'
    ),
    buttons: [
      Dialog.cancelButton({ label: tr.__('Cancel') }),
      Dialog.warnButton({ label: tr.__('Stop my server') })
    ]
  });
  if (!result.button.accept) {
    return false;
  }
  try {
    await requestAPI<unknown>('stop', { method: 'POST' });
  } catch (error) {
    Notification.error(
      tr.__(
        'Could not stop your server: %1',
        (error as Error).message ?? String(error)
      ),
      { autoClose: false }
    );
    return false;
  }
  Notification.success(tr.__('Your server is stopping. Billing stops now.'), {
    autoClose: 5000
  });
  const hubPrefix = PageConfig.getOption('hubPrefix');
  if (hubPrefix) {
    // The server is going away: take the student back to the hub's home page.
    const home =
      PageConfig.getOption('hubHost') + URLExt.join(hubPrefix, 'home');
    window.setTimeout(() => window.location.assign(home), 3000);
  }
  return true;
}

/**
 * The gpu service's usage pages (sessions, spend, budgets) at the hub's
 * `/services/gpu/`, or null outside JupyterHub.
 */
export function usagePageUrl(): string | null {
  const hubPrefix = PageConfig.getOption('hubPrefix');
  if (!hubPrefix) {
    return null;
  }
  const base = hubPrefix.replace(/hub\/?$/, '');
  return PageConfig.getOption('hubHost') + URLExt.join(base, 'services/gpu/');
}
