/**
 * "Restart on the bigger profile": the button of the GPU-memory notice (kind `bigger:<slug>`).
 *
 * It saves the open documents, keeps the open notebooks' paths in localStorage, and asks this
 * server to have the gpu service restart it on that profile (`POST restart-bigger`; the service
 * takes only the next bigger profile the user may use). Once this server has gone, the page goes
 * to the hub's spawn-pending page (the queue, the progress, or a refusal such as the budget's).
 * When the Lab loads again, it reopens the notebooks kept and forgets them (docs/user.md).
 */
import { PageConfig, URLExt } from '@jupyterlab/coreutils';

import { requestAPI } from './handler';

/** The localStorage key of the notebooks to reopen after the restart. */
export const REOPEN_KEY = 'jupyterhub-gpu:reopen';

/** The notice kind that carries the button: `bigger:<slug>`. */
export const KIND_PREFIX = 'bigger:';

/** The bigger profile's slug of a notice kind, or null when the notice has no button. */
export function biggerSlug(kind: string | null | undefined): string | null {
  if (!kind || !kind.startsWith(KIND_PREFIX)) {
    return null;
  }
  const slug = kind.slice(KIND_PREFIX.length);
  return /^[A-Za-z0-9._-]+$/.test(slug) ? slug : null;
}

/** The hub's spawn-pending page of this server (on the hub's host, when it is another). */
export function spawnPendingUrl(): string {
  const user = PageConfig.getOption('hubUser');
  const server = PageConfig.getOption('hubServerName');
  const parts = ['spawn-pending', encodeURIComponent(user)];
  if (server) {
    parts.push(encodeURIComponent(server));
  }
  const hubPrefix = PageConfig.getOption('hubPrefix') || '/hub/';
  return PageConfig.getOption('hubHost') + URLExt.join(hubPrefix, ...parts);
}

/** What a restart needs of the Lab (given by the plugin; replaced in tests). */
export interface IRestartDeps {
  /** Save every open document (`docmanager:save-all`). */
  save: () => Promise<unknown>;
  /** The paths of the open notebooks. */
  openPaths: () => string[];
  /** Ask this server to restart on `slug` (default: `POST restart-bigger`). */
  request?: (slug: string) => Promise<unknown>;
  /** Whether this server still answers (default: `GET stats?history=0`). */
  alive?: () => Promise<boolean>;
  /** Go to a URL (default: `window.location.assign`). */
  go?: (url: string) => void;
  /** Where the paths are kept (default: `window.localStorage`). */
  storage?: Storage;
  /** Milliseconds between looks at whether the server has gone. */
  pollMs?: number;
  /** How many looks before going to the hub's page anyway. */
  maxPolls?: number;
}

async function defaultAlive(): Promise<boolean> {
  try {
    await requestAPI<unknown>('stats?history=0');
    return true;
  } catch {
    return false;
  }
}

/**
 * Save, keep the open notebooks, ask for the restart; then wait for this server to go and open
 * the hub's spawn-pending page. A refusal (an error with the service's message) is thrown, and
 * nothing is kept.
 */
export async function restartOnBigger(
  slug: string,
  deps: IRestartDeps
): Promise<void> {
  const storage = deps.storage ?? window.localStorage;
  await deps.save();
  const paths = deps.openPaths();
  storage.setItem(REOPEN_KEY, JSON.stringify(paths));
  const request =
    deps.request ??
    ((profile: string) =>
      requestAPI<unknown>('restart-bigger', {
        method: 'POST',
        body: JSON.stringify({ profile })
      }));
  try {
    await request(slug);
  } catch (reason) {
    storage.removeItem(REOPEN_KEY);
    throw reason;
  }
  const alive = deps.alive ?? defaultAlive;
  const pollMs = deps.pollMs ?? 1000;
  const maxPolls = deps.maxPolls ?? 120;
  for (let i = 0; i < maxPolls && (await alive()); i++) {
    await new Promise(resolve => setTimeout(resolve, pollMs));
  }
  (deps.go ?? ((url: string) => window.location.assign(url)))(
    spawnPendingUrl()
  );
}

/**
 * The notebooks kept by a restart, forgotten at once (so they are reopened once); [] when none.
 */
export function takeReopen(storage: Storage = window.localStorage): string[] {
  const saved = storage.getItem(REOPEN_KEY);
  storage.removeItem(REOPEN_KEY);
  if (!saved) {
    return [];
  }
  try {
    const paths: unknown = JSON.parse(saved);
    return Array.isArray(paths)
      ? paths.filter((p): p is string => typeof p === 'string' && p !== '')
      : [];
  } catch {
    return [];
  }
}

/** What `openNotebooks` reads of the Lab: the widgets of its main area. */
export interface IShellLike {
  shell: { widgets(area?: string): Iterable<unknown> };
}

/** The paths of the notebooks open in the main area (document widgets of `.ipynb` files). */
export function openNotebooks(app: IShellLike): string[] {
  const paths: string[] = [];
  for (const widget of app.shell.widgets('main')) {
    const path = (widget as { context?: { path?: unknown } }).context?.path;
    if (
      typeof path === 'string' &&
      path.endsWith('.ipynb') &&
      !paths.includes(path)
    ) {
      paths.push(path);
    }
  }
  return paths;
}
