/**
 * Notebook jobs in JupyterLab: "Run notebook as a GPU job" (file browser and notebook
 * context menus, command palette) and the job list (state, duration, cost, output).
 *
 * The Lab talks to its own server extension (`gpu/api/v1/jobs`, `gpu/api/v1/pricing`),
 * which passes the calls to the gpu service with the server's token: the service decides
 * who may see or cancel which job.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { formatMoney, formatSeconds } from './format';
import { requestAPI } from './handler';
import type { ILocalizer } from './i18n';

/** A job as the service shows it. */
export interface IJob {
  id: string;
  user: string;
  notebook: string;
  profile: string;
  state:
    'starting' | 'running' | 'succeeded' | 'failed' | 'timed_out' | 'cancelled';
  error: string | null;
  created: string;
  started: string | null;
  finished: string | null;
  duration_seconds: number | null;
  minutes_billed: number;
  cost: string;
  cost_display: string;
  /** The currency the job's session was charged in, and the admin's symbol ("" lets the language choose). */
  currency: string;
  currency_symbol?: string;
  output_notebook: string;
  log_file: string;
  output_url: string;
  time_limit_minutes: number;
}

/** What a new job needs. */
export interface IJobRequest {
  notebook: string;
  profile?: string;
  parameters?: Record<string, unknown>;
  time_limit_minutes?: number;
}

/** A profile a job may use. */
export interface IProfile {
  slug: string;
  display_name: string;
  rate_per_minute: string;
  currency: string;
}

export const jobsAPI = {
  list: async (): Promise<IJob[]> =>
    (await requestAPI<{ jobs: IJob[] }>('jobs')).data.jobs,
  create: async (request: IJobRequest): Promise<IJob> =>
    (
      await requestAPI<IJob>('jobs', {
        method: 'POST',
        body: JSON.stringify(request)
      })
    ).data,
  cancel: async (id: string): Promise<IJob> =>
    (
      await requestAPI<IJob>(`jobs/${encodeURIComponent(id)}/cancel`, {
        method: 'POST',
        body: '{}'
      })
    ).data,
  profiles: async (): Promise<IProfile[]> =>
    (await requestAPI<{ profiles: IProfile[] }>('pricing')).data.profiles
};

/**
 * The notebook path of a file browser item, from its tooltip ("Path: <folder>") and name;
 * null when the item is not a notebook or its folder is cut short in the tooltip.
 */
export function notebookPathFromItem(node: HTMLElement | null): string | null {
  if (!node || node.dataset.fileType !== 'notebook') {
    return null;
  }
  const name = node
    .querySelector('.jp-DirListing-itemText')
    ?.textContent?.trim();
  if (!name) {
    return null;
  }
  const folder = /(?:^|\n)Path: (.*)/.exec(node.title ?? '')?.[1]?.trim();
  if (folder?.endsWith('...')) {
    return null;
  }
  return folder ? `${folder}/${name}` : name;
}

/**
 * The notebook "Run notebook as a GPU job" is for: the command's `path` argument, else the
 * file browser item its context menu was opened on, else the current widget's notebook;
 * '' when there is none (the form then asks for it).
 */
export function jobNotebookPath(
  argument: unknown,
  contextItem: () => HTMLElement | null,
  currentWidget: unknown
): string {
  let path = typeof argument === 'string' ? argument : null;
  if (!path) {
    path = notebookPathFromItem(contextItem());
  }
  if (!path) {
    const candidate = (currentWidget as any)?.context?.path;
    path =
      typeof candidate === 'string' && candidate.endsWith('.ipynb')
        ? candidate
        : '';
  }
  return path;
}

/**
 * Parse the parameters field: empty, or a JSON object of Python names.
 *
 * @throws Error with a message for the user
 */
export function parseParameters(
  text: string,
  tr: ILocalizer
): Record<string, unknown> | undefined {
  if (!text.trim()) {
    return undefined;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error(tr.__('Parameters must be JSON, e.g. {"epochs": 5}'));
  }
  if (
    !value ||
    typeof value !== 'object' ||
    Array.isArray(value) ||
    !Object.keys(value).every(k => /^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
  ) {
    throw new Error(tr.__('Parameters must be JSON, e.g. {"epochs": 5}'));
  }
  return value as Record<string, unknown>;
}

/** The label of a job state. */
export function stateLabel(state: IJob['state'], tr: ILocalizer): string {
  const labels: Record<IJob['state'], string> = {
    starting: tr.__('starting'),
    running: tr.__('running'),
    succeeded: tr.__('succeeded'),
    failed: tr.__('failed'),
    timed_out: tr.__('time limit reached'),
    cancelled: tr.__('cancelled')
  };
  return labels[state] ?? state;
}

/** One row of the job list, as text. */
export function jobRow(
  job: IJob,
  tr: ILocalizer
): { state: string; duration: string; cost: string } {
  return {
    state: stateLabel(job.state, tr),
    duration:
      job.duration_seconds === null
        ? '—'
        : formatSeconds(job.duration_seconds, tr),
    cost: tr.__(
      '%1 (%2 min)',
      formatMoney(
        job.cost,
        job.currency_symbol ?? '',
        job.currency,
        tr.language
      ),
      job.minutes_billed
    )
  };
}

/** The form of "Run notebook as a GPU job". */
class JobForm extends Widget {
  constructor(path: string, profiles: IProfile[], tr: ILocalizer) {
    super();
    this._tr = tr;
    this.addClass('jp-gpu-JobForm');
    const row = (text: string, input: HTMLElement): HTMLLabelElement => {
      const label = document.createElement('label');
      const span = document.createElement('span');
      span.textContent = text;
      label.append(span, input);
      return label;
    };
    this._path = document.createElement('input');
    this._path.value = path;
    this._path.name = 'notebook';
    this._profile = document.createElement('select');
    this._profile.name = 'profile';
    for (const p of profiles) {
      const option = document.createElement('option');
      option.value = p.slug;
      option.textContent = `${p.display_name} (${formatMoney(p.rate_per_minute, '', p.currency, tr.language)}/min)`;
      this._profile.append(option);
    }
    this._limit = document.createElement('input');
    this._limit.type = 'number';
    this._limit.min = '1';
    this._limit.value = '60';
    this._limit.name = 'time_limit_minutes';
    this._parameters = document.createElement('textarea');
    this._parameters.name = 'parameters';
    this._parameters.placeholder = '{"epochs": 5}';
    this.node.append(
      row(tr.__('Notebook'), this._path),
      row(tr.__('Profile'), this._profile),
      row(tr.__('Time limit (minutes)'), this._limit),
      row(tr.__('Parameters (JSON, optional)'), this._parameters)
    );
  }

  getValue(): IJobRequest {
    return {
      notebook: this._path.value.trim(),
      profile: this._profile.value || undefined,
      time_limit_minutes: Number(this._limit.value) || undefined,
      parameters: parseParameters(this._parameters.value, this._tr)
    };
  }

  private _tr: ILocalizer;
  private _path: HTMLInputElement;
  private _profile: HTMLSelectElement;
  private _limit: HTMLInputElement;
  private _parameters: HTMLTextAreaElement;
}

/** Ask for the job's profile, limit and parameters, then submit it. */
export async function runJobDialog(
  path: string,
  tr: ILocalizer,
  api = jobsAPI
): Promise<IJob | null> {
  let profiles: IProfile[] = [];
  try {
    profiles = await api.profiles();
  } catch (error) {
    console.warn('jupyterhub-gpu: no profiles for jobs', error);
  }
  let request: IJobRequest;
  try {
    const result = await showDialog({
      title: tr.__('Run notebook as a GPU job'),
      body: new JobForm(path, profiles, tr),
      buttons: [
        Dialog.cancelButton({ label: tr.__('Cancel') }),
        Dialog.okButton({ label: tr.__('Run job') })
      ]
    });
    if (!result.button.accept || !result.value) {
      return null;
    }
    request = result.value as IJobRequest;
  } catch (error: any) {
    Notification.error(String(error?.message ?? error), { autoClose: 8000 });
    return null;
  }
  try {
    const job = await api.create(request);
    Notification.success(
      tr.__(
        'Job %1 started: its server stops when the notebook ends. Output: ~/%2',
        job.id,
        job.output_notebook
      ),
      { autoClose: 8000 }
    );
    return job;
  } catch (error: any) {
    Notification.error(
      tr.__('Could not start the job: %1', String(error?.message ?? error)),
      { autoClose: 10000 }
    );
    return null;
  }
}

/** The job list: state, duration, cost and a link to the output, refreshed while shown. */
export class JobsWidget extends Widget {
  constructor(options: JobsWidget.IOptions) {
    super();
    this._options = options;
    this.id = 'jupyterhub-gpu-jobs';
    this.addClass('jp-gpu-Jobs');
    this.title.closable = true;
    this._table = document.createElement('table');
    this._message = document.createElement('p');
    this.node.append(this._message, this._table);
  }

  async refresh(): Promise<void> {
    try {
      this.render(await (this._options.api ?? jobsAPI).list());
    } catch (error: any) {
      this._message.textContent = String(error?.message ?? error);
    }
  }

  render(jobs: IJob[]): void {
    const tr = this._options.localizer();
    this.title.label = tr.__('GPU jobs');
    this._message.textContent = jobs.length
      ? ''
      : tr.__(
          'No jobs yet: right-click a notebook, "Run notebook as a GPU job".'
        );
    const head = [
      tr.__('Job'),
      tr.__('Notebook'),
      tr.__('State'),
      tr.__('Duration'),
      tr.__('Cost'),
      tr.__('Output'),
      ''
    ];
    this._table.replaceChildren();
    const header = this._table.createTHead().insertRow();
    for (const text of head) {
      const th = document.createElement('th');
      th.textContent = text;
      header.append(th);
    }
    const body = this._table.createTBody();
    for (const job of jobs) {
      const row = body.insertRow();
      row.dataset.jobId = job.id;
      row.dataset.state = job.state;
      const text = jobRow(job, tr);
      for (const value of [
        job.id,
        job.notebook,
        text.state,
        text.duration,
        text.cost
      ]) {
        row.insertCell().textContent = value;
      }
      if (job.error) {
        row.cells[2].title = job.error;
      }
      const link = document.createElement('a');
      link.href = job.output_url; // already below the hub's base URL
      link.textContent = job.output_notebook;
      link.target = '_blank';
      row.insertCell().append(link);
      const actions = row.insertCell();
      if (job.state === 'starting' || job.state === 'running') {
        const cancel = document.createElement('button');
        cancel.className = 'jp-Button jp-mod-styled jp-mod-warn';
        cancel.textContent = tr.__('Cancel job');
        cancel.addEventListener('click', () => {
          void (this._options.api ?? jobsAPI)
            .cancel(job.id)
            .then(() => this.refresh());
        });
        actions.append(cancel);
      }
    }
  }

  protected onAfterShow(): void {
    void this.refresh();
    this._timer = window.setInterval(() => void this.refresh(), 10_000);
  }

  protected onAfterHide(): void {
    window.clearInterval(this._timer);
  }

  dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  private _options: JobsWidget.IOptions;
  private _table: HTMLTableElement;
  private _message: HTMLParagraphElement;
  private _timer = 0;
}

export namespace JobsWidget {
  export interface IOptions {
    localizer: () => ILocalizer;
    api?: typeof jobsAPI;
  }
}
