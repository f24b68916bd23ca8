// jobs.ts imports JupyterLab ES modules for its dialogs and page config, not used here.
jest.mock('@jupyterlab/apputils', () => ({}));
jest.mock('../handler', () => ({ requestAPI: jest.fn() }));

import {
  type IJob,
  jobNotebookPath,
  jobRow,
  JobsWidget,
  notebookPathFromItem,
  parseParameters
} from '../jobs';
import { en, zh } from './helpers';

function job(overrides: Partial<IJob> = {}): IJob {
  return {
    id: 'a1b2c3d4e5f6',
    user: 'stu1',
    notebook: 'work/train.ipynb',
    profile: 't4',
    state: 'succeeded',
    error: null,
    created: '2026-11-29T20:00:00Z',
    started: '2026-11-29T20:00:08Z',
    finished: '2026-11-29T20:01:18Z',
    duration_seconds: 70,
    minutes_billed: 2,
    cost: '0.1',
    cost_display: 'CN¥0.10',
    currency: 'CNY',
    currency_symbol: '',
    output_notebook: 'work/jobs/a1b2c3d4e5f6/train.ipynb',
    log_file: 'work/jobs/a1b2c3d4e5f6/job.log',
    output_url: '/user/stu1/lab/tree/work/jobs/a1b2c3d4e5f6/train.ipynb',
    time_limit_minutes: 60,
    ...overrides
  };
}

function item(name: string, title: string, type = 'notebook'): HTMLElement {
  const li = document.createElement('li');
  li.className = 'jp-DirListing-item';
  li.dataset.fileType = type;
  li.title = title;
  const text = document.createElement('span');
  text.className = 'jp-DirListing-itemText';
  text.textContent = name;
  li.append(text);
  return li;
}

describe('notebookPathFromItem', () => {
  it('joins the folder of the tooltip and the name', () => {
    expect(
      notebookPathFromItem(
        item('train.ipynb', 'Name: train.ipynb\nSize: 1 KB\nPath: work/mnist')
      )
    ).toBe('work/mnist/train.ipynb');
    expect(
      notebookPathFromItem(item('top.ipynb', 'Name: top.ipynb\nSize: 1 KB'))
    ).toBe('top.ipynb');
  });

  it('gives up on files that are not notebooks, and on folders cut short', () => {
    expect(notebookPathFromItem(item('a.py', 'Name: a.py', 'python'))).toBe(
      null
    );
    expect(
      notebookPathFromItem(item('x.ipynb', 'Name: x.ipynb\nPath: very/long...'))
    ).toBe(null);
    expect(notebookPathFromItem(null)).toBe(null);
  });
});

describe('jobNotebookPath', () => {
  const notebook = { context: { path: 'work/open.ipynb' } };

  it('takes the argument, else the file browser item, else the open notebook', () => {
    const hit = jest.fn(() =>
      item('train.ipynb', 'Name: train.ipynb\nPath: work')
    );
    expect(jobNotebookPath('given.ipynb', hit, notebook)).toBe('given.ipynb');
    expect(hit).not.toHaveBeenCalled();
    expect(jobNotebookPath(undefined, hit, notebook)).toBe('work/train.ipynb');
    expect(jobNotebookPath(undefined, () => null, notebook)).toBe(
      'work/open.ipynb'
    );
  });

  it('is empty without a notebook anywhere', () => {
    const editor = { context: { path: 'work/train.py' } };
    expect(jobNotebookPath(3, () => null, editor)).toBe('');
    expect(jobNotebookPath('', () => null, null)).toBe('');
  });
});

describe('parseParameters', () => {
  it('reads a JSON object of Python names; empty means none', () => {
    expect(parseParameters('', en)).toBeUndefined();
    expect(parseParameters(' {"epochs": 5, "lr": 0.001} ', en)).toEqual({
      epochs: 5,
      lr: 0.001
    });
  });

  it('refuses anything else with a message', () => {
    for (const text of ['[1]', '{"not a name": 1}', 'epochs=5', '3']) {
      expect(() => parseParameters(text, en)).toThrow(
        'Parameters must be JSON'
      );
    }
    expect(() => parseParameters('x', zh)).toThrow('参数必须是 JSON');
  });
});

describe('job list', () => {
  it('shows state, duration, cost and a link to the output', () => {
    expect(jobRow(job(), en)).toEqual({
      state: 'succeeded',
      duration: expect.any(String),
      cost: 'CN¥0.10 (2 min)'
    });
    // in Chinese the language's own symbol, as on the service's pages; an admin's symbol everywhere
    expect(jobRow(job(), zh).cost.startsWith('¥0.10')).toBe(true);
    expect(
      jobRow(job({ currency_symbol: 'RMB ' }), zh).cost.startsWith('RMB 0.10')
    ).toBe(true);
    expect(jobRow(job({ state: 'timed_out' }), zh).state).toBe('已达时间上限');
    expect(jobRow(job({ duration_seconds: null }), en).duration).toBe('—');

    const cancel = jest.fn(async () => job({ state: 'cancelled' }));
    const widget = new JobsWidget({
      localizer: () => en,
      api: {
        list: jest.fn(async () => []),
        create: jest.fn(),
        cancel,
        profiles: jest.fn()
      } as any
    });
    widget.render([
      job(),
      job({ id: 'ffffffffffff', state: 'running', error: null })
    ]);
    const rows = widget.node.querySelectorAll('tbody tr');
    expect(rows).toHaveLength(2);
    const link = rows[0].querySelector('a') as HTMLAnchorElement;
    expect(link.href).toBe(
      'http://localhost/user/stu1/lab/tree/work/jobs/a1b2c3d4e5f6/train.ipynb'
    );
    expect(rows[0].querySelector('button')).toBeNull();
    (rows[1].querySelector('button') as HTMLButtonElement).click();
    expect(cancel).toHaveBeenCalledWith('ffffffffffff');
    widget.dispose();
  });
});
