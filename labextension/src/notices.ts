/**
 * Notices from the gpu service (budget thresholds, idle-stop countdown, memory advice) as
 * JupyterLab notifications: each notice id is shown once.
 *
 * The ids already shown are kept in JupyterLab's state database, so a reload does not show
 * them again. When the student dismisses a notification (its "Dismiss" button, or the
 * notification center), the notice is dismissed on the server too, and stops coming back.
 */
import { Notification } from '@jupyterlab/apputils';
import type { IStateDB } from '@jupyterlab/statedb';

import { biggerSlug } from './bigger';
import { requestAPI } from './handler';
import type { ILocalizer } from './i18n';
import type { INotice } from './types';

/** The state database key of the shown notice ids. */
export const STATE_KEY = 'jupyterhub-gpu:notices';

/** How many shown ids are remembered (the newest). */
export const MAX_REMEMBERED = 200;

/** Milliseconds an info notice stays on screen; warnings and errors stay until closed. */
export const INFO_AUTO_CLOSE = 15_000;

/**
 * The set of notice ids already shown, oldest first, bounded to `MAX_REMEMBERED`.
 */
export class SeenNotices {
  constructor(ids: Iterable<number> = []) {
    for (const id of ids) {
      this._remember(id);
    }
  }

  /** Whether the notice id was shown already. */
  has(id: number): boolean {
    return this._ids.has(id);
  }

  /**
   * The notices not shown yet, each id once, and mark them shown.
   */
  take(notices: readonly INotice[]): INotice[] {
    const fresh: INotice[] = [];
    for (const notice of notices) {
      if (!Number.isInteger(notice.id) || this._ids.has(notice.id)) {
        continue;
      }
      this._remember(notice.id);
      fresh.push(notice);
    }
    return fresh;
  }

  /** The ids to persist. */
  toJSON(): number[] {
    return [...this._ids];
  }

  private _remember(id: number): void {
    this._ids.delete(id);
    this._ids.add(id);
    while (this._ids.size > MAX_REMEMBERED) {
      const oldest = this._ids.values().next().value as number;
      this._ids.delete(oldest);
    }
  }

  private _ids = new Set<number>();
}

/** The JupyterLab notification type for a notice level. */
export function notificationType(level: string): Notification.TypeOptions {
  switch (level) {
    case 'error':
    case 'critical':
      return 'error';
    case 'warning':
      return 'warning';
    case 'success':
      return 'success';
    default:
      return 'info';
  }
}

/**
 * Shows new notices as notifications and dismisses them on the server when closed.
 */
export class NoticeCenter {
  constructor(options: NoticeCenter.IOptions) {
    this._options = options;
    this._dismiss =
      options.dismiss ??
      (async (id: number) => {
        await requestAPI<unknown>(`notices/${id}/dismiss`, { method: 'POST' });
      });
    this._restored = this._restore();
    Notification.manager.changed.connect(this._onNotificationChanged, this);
  }

  /** Show the notices of a stats answer that were not shown before. */
  async update(notices: readonly INotice[] | null | undefined): Promise<void> {
    await this._restored;
    if (this._disposed || !notices || notices.length === 0) {
      return;
    }
    const fresh = this._seen.take(notices);
    if (fresh.length === 0) {
      return;
    }
    for (const notice of fresh) {
      this._show(notice);
    }
    await this._save();
  }

  /** Stop listening to the notification manager. */
  dispose(): void {
    this._disposed = true;
    Notification.manager.changed.disconnect(this._onNotificationChanged, this);
  }

  private _show(notice: INotice): void {
    const tr = this._options.localizer();
    const type = notificationType(notice.level);
    const actions: Notification.IAction[] = [];
    if (this._options.showPanel) {
      const showPanel = this._options.showPanel;
      actions.push({
        label: tr.__('Show usage'),
        caption: tr.__('Show GPU usage and cost'),
        callback: event => {
          // keep the notification: opening the panel is not dismissing the notice
          event.preventDefault();
          showPanel();
        }
      });
    }
    const slug = biggerSlug(notice.kind);
    if (slug && this._options.restartBigger) {
      const restart = this._options.restartBigger;
      actions.push({
        label: tr.__('Restart on the bigger profile'),
        caption: tr.__(
          'Save the open notebooks, restart this server on the bigger profile and reopen them'
        ),
        callback: event => {
          // the notice stays until the server restarts: a refusal is shown next to it
          event.preventDefault();
          restart(slug).catch(reason => {
            Notification.error(
              tr.__(
                'Could not restart on the bigger profile: %1',
                reason instanceof Error ? reason.message : String(reason)
              ),
              { autoClose: false }
            );
          });
        }
      });
    }
    actions.push({
      label: tr.__('Dismiss'),
      caption: tr.__('Do not show this notice again'),
      displayType: 'link',
      callback: () => undefined
    });
    const id = Notification.emit(notice.message, type, {
      autoClose:
        type === 'info' || type === 'success' ? INFO_AUTO_CLOSE : false,
      actions,
      data: { source: 'jupyterhub-gpu', notice: notice.id }
    });
    this._shown.set(id, notice.id);
  }

  private _onNotificationChanged(
    _: unknown,
    change: Notification.IChange
  ): void {
    if (change.type !== 'removed') {
      return;
    }
    const noticeId = this._shown.get(change.notification.id);
    if (noticeId === undefined) {
      return;
    }
    this._shown.delete(change.notification.id);
    this._dismiss(noticeId).catch(reason => {
      // The id stays remembered as shown, so the notice does not come back in this browser.
      console.warn(
        `jupyterhub-gpu: could not dismiss notice ${noticeId}`,
        reason
      );
    });
  }

  private async _restore(): Promise<void> {
    const state = this._options.state;
    if (!state) {
      return;
    }
    try {
      const saved = (await state.fetch(STATE_KEY)) as
        { shown?: unknown } | undefined;
      const ids = Array.isArray(saved?.shown)
        ? saved.shown.filter((id): id is number => Number.isInteger(id))
        : [];
      this._seen = new SeenNotices(ids);
    } catch (reason) {
      console.warn('jupyterhub-gpu: could not read the shown notices', reason);
    }
  }

  private async _save(): Promise<void> {
    const state = this._options.state;
    if (!state) {
      return;
    }
    try {
      await state.save(STATE_KEY, { shown: this._seen.toJSON() });
    } catch (reason) {
      console.warn('jupyterhub-gpu: could not save the shown notices', reason);
    }
  }

  private _options: NoticeCenter.IOptions;
  private _dismiss: (id: number) => Promise<void>;
  private _restored: Promise<void>;
  private _seen = new SeenNotices();
  /** Notification id -> notice id, for the notifications on screen or in the center. */
  private _shown = new Map<string, number>();
  private _disposed = false;
}

/** NoticeCenter statics. */
export namespace NoticeCenter {
  /** What the notice center needs. */
  export interface IOptions {
    localizer: () => ILocalizer;
    /** Where shown ids are remembered across reloads (optional). */
    state?: IStateDB | null;
    /** Open the side panel (adds a "Show usage" action when given). */
    showPanel?: () => void;
    /** Restart on the bigger profile of a `bigger:<slug>` notice (adds its button when given). */
    restartBigger?: (slug: string) => Promise<void>;
    /** Dismiss a notice on the server (default: `POST notices/{id}/dismiss`). */
    dismiss?: (id: number) => Promise<void>;
  }
}
