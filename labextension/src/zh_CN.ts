/**
 * Simplified Chinese (zh-CN) strings of this extension, keyed by the English msgid.
 *
 * Placeholders (%1, %2, …) must match the msgid's; a test checks that every msgid in the
 * sources has an entry here.
 */
export const ZH_CN: Readonly<Record<string, string>> = Object.freeze({
  // durations (format.ts)
  '%1 min': '%1 分钟',
  '%1 h %2 min': '%1 小时 %2 分钟',
  '%1 d %2 h': '%1 天 %2 小时',
  '%1 s': '%1 秒',

  // commands (index.ts)
  'GPU: Show usage panel': 'GPU：显示用量面板',
  'Show GPU usage and cost': '显示 GPU 用量和费用',
  'GPU: Stop my server (stop billing)': 'GPU：停止我的服务器（停止计费）',
  'GPU: Open TensorBoard': 'GPU：打开 TensorBoard',

  // notices (notices.ts)
  'Show usage': '查看用量',
  Dismiss: '关闭',
  'Do not show this notice again': '不再显示此通知',

  // stop dialog (panel.ts)
  'Stop your server?': '停止你的服务器？',
  'This stops your JupyterLab server and all its kernels, and billing stops. Unsaved changes in open notebooks are lost: save them first. Your files stay.':
    '这将停止你的 JupyterLab 服务器及其所有内核，并停止计费。已打开笔记本中未保存的更改会丢失，请先保存。你的文件会保留。',
  Cancel: '取消',
  'Stop my server': '停止服务器',
  'Could not stop your server: %1': '无法停止服务器：%1',
  'Your server is stopping. Billing stops now.': '服务器正在停止，计费已停止。',

  // side panel (panel.ts)
  'GPU usage and cost': 'GPU 用量和费用',
  Simulated: '模拟',
  'Simulated %1': '模拟 %1',
  GPUs: 'GPU 列表',
  'Open TensorBoard': '打开 TensorBoard',
  'Stop my server (stop billing)': '停止我的服务器（停止计费）',
  'My usage and budgets (all sessions)': '我的用量与预算（全部会话）',
  'No GPU figures': '没有 GPU 数据',
  'No GPU is assigned to this server.': '此服务器未分配 GPU。',
  'No GPU is assigned to this server (CPU-only profile).':
    '此服务器未分配 GPU（仅 CPU 配置）。',
  'Simulated GPUs: these figures are not from real hardware.':
    '模拟 GPU：这些数据并非来自真实硬件。',
  'Cannot reach the GPU stats (%1); the figures below are out of date.':
    '无法获取 GPU 数据（%1），以下数据已过时。',
  'Cannot reach the GPU stats: %1': '无法获取 GPU 数据：%1',
  'The GPU figures are out of date: the sampler is behind.':
    'GPU 数据已过时：采样滞后。',
  'The billing service is unreachable: cost and budget may be out of date.':
    '无法连接计费服务：费用和预算可能不是最新的。',
  'Running on': '运行于',
  Profile: '配置',
  'Cost so far': '当前费用',
  '%1 for %2': '%1（%2）',
  Rate: '费率',
  '%1 per minute': '每分钟 %1',
  Started: '开始时间',
  Budget: '预算',
  'Budget lasts': '预算可用',
  'about %1 at this rate': '按当前费率约 %1',
  'unknown (no billed session found)': '未知（未找到计费会话）',
  'GPU utilization': 'GPU 利用率',
  'now %1 · peak %2': '当前 %1 · 峰值 %2',
  now: '现在',
  'GPU memory': 'GPU 显存',
  'now %1 of %2 GB · peak %3 GB': '当前 %1 / %2 GB · 峰值 %3 GB',
  '%1 GB': '%1 GB',
  '%1 °C': '%1 °C',
  '%1 W': '%1 W',
  'Updated %1 ago': '%1前更新',

  // status bar (statusbar.ts)
  'CPU only': '仅 CPU',
  '%1× %2': '%1× %2',
  '%1 (simulated)': '%1（模拟）',
  '%1/%2 GB': '%1/%2 GB',
  '%1 (%2)': '%1（%2）',
  '%1 GPU-h left': '剩余 %1 GPU 小时',
  '%1 left': '剩余 %1',
  'GPU stats unavailable': 'GPU 数据不可用',
  'GPU …': 'GPU …',
  'GPU %1': 'GPU %1',
  stale: '已过时',
  'Click to show GPU usage and cost.': '点击查看 GPU 用量和费用。',

  // right-sizing advice (advice.ts)
  'A cheaper profile would do': '更便宜的配置就够用',
  '%1 of %2 GPUs did work (peak %3 GB), busy %4%% of the time.':
    '%2 块 GPU 中只有 %1 块在工作（峰值 %3 GB），%4%% 的时间处于忙碌状态。',
  '1 GPU would have done.': '1 块 GPU 就够了。',
  '%1 GPUs would have done.': '%1 块 GPU 就够了。',
  'Peak %1 GB of %2 GB GPU memory, busy %3%% of the time.':
    'GPU 显存峰值 %1 GB（共 %2 GB），%3%% 的时间处于忙碌状态。',
  'The %1 profile (%2/min instead of %3/min) would very likely have served.':
    '%1 配置（每分钟 %2，而不是 %3）很可能就能满足需要。',
  'The %1 profile (%2/min instead of %3/min) would likely have served.':
    '%1 配置（每分钟 %2，而不是 %3）可能就能满足需要。',
  'This session would have cost %1 instead of %2.':
    '本次会话本可只花 %1，而不是 %2。',
  'So far this session would have cost %1 instead of %2.':
    '到目前为止，本次会话本可只花 %1，而不是 %2。',
  'Choose it when you next start a server: the advice is measured on this session.':
    '下次启动服务器时可以选择它：此建议基于本次会话的实测用量。',

  // stop when done (stopwhendone.ts, index.ts)
  'GPU: Stop this server when the running cells finish':
    'GPU：正在运行的单元格结束后停止此服务器',
  'Stop this server when the running cells finish':
    '正在运行的单元格结束后停止此服务器',
  'Stops when the running cells finish': '单元格运行结束后将停止',
  'Stops after the next run finishes': '下一次运行结束后将停止',
  'Run finished: saving notebooks, then stopping':
    '运行已结束：正在保存笔记本，随后停止',
  'Server stopping (billing stops)': '服务器正在停止（停止计费）',

  // notebook jobs (jobs.ts, index.ts)
  'GPU: Show notebook jobs': 'GPU：查看笔记本作业',
  'Run notebook as a GPU job': '作为 GPU 作业运行笔记本',
  'Parameters must be JSON, e.g. {"epochs": 5}':
    '参数必须是 JSON，例如 {"epochs": 5}',
  starting: '启动中',
  running: '运行中',
  succeeded: '成功',
  failed: '失败',
  'time limit reached': '已达时间上限',
  cancelled: '已取消',
  '%1 (%2 min)': '%1（%2 分钟）',
  Notebook: '笔记本',
  'Time limit (minutes)': '时间上限（分钟）',
  'Parameters (JSON, optional)': '参数（JSON，可选）',
  'Run job': '运行作业',
  'Job %1 started: its server stops when the notebook ends. Output: ~/%2':
    '作业 %1 已开始：笔记本运行结束后其服务器会停止。输出：~/%2',
  'Could not start the job: %1': '无法启动作业：%1',
  'GPU jobs': 'GPU 作业',
  'No jobs yet: right-click a notebook, "Run notebook as a GPU job".':
    '还没有作业：右键点击笔记本，选择“作为 GPU 作业运行笔记本”。',
  Job: '作业',
  State: '状态',
  Duration: '时长',
  Cost: '费用',
  Output: '输出',
  'Cancel job': '取消作业',

  // the GPU-memory notice's button (bigger.ts, notices.ts)
  'Restart on the bigger profile': '在更大的配置上重启',
  'Save the open notebooks, restart this server on the bigger profile and reopen them':
    '保存打开的笔记本，在更大的配置上重启此服务器并重新打开它们',
  'Could not restart on the bigger profile: %1': '无法在更大的配置上重启：%1',

  // shared GPUs: a share or a MIG slice (figures.ts, statusbar.ts, panel.ts)
  'your share: %1 of %2 GB': '你的份额：%1 / %2 GB',
  'your MIG slice: %1 of %2 GB': '你的 MIG 分区：%1 / %2 GB',
  'GPU busy %1 (shared by %2)': 'GPU 忙碌 %1（%2 人共用）',
  'GPU busy %1 (shared)': 'GPU 忙碌 %1（共用）',
  'GPU busy %1 (whole GPU, shared by %2)': 'GPU 忙碌 %1（整块 GPU，%2 人共用）',
  'GPU busy %1 (whole GPU)': 'GPU 忙碌 %1（整块 GPU）',
  'your use %1': '你的使用 %1',
  'GPU share': 'GPU 份额',
  '%1 of the GPU: %2 GB memory cap, compute shared':
    'GPU 的 %1：显存上限 %2 GB，算力共用',
  'MIG slice %1: %2 GB, its compute your own': 'MIG 分区 %1：%2 GB，算力独享',
  'A share of a GPU: the memory figures are your own, under your cap; the GPU’s compute is shared, so speed varies with what the others on it run.':
    '共用 GPU 的一份：显存数字是你自己的，不超过你的上限；GPU 的算力是共用的，速度随同一 GPU 上其他人的运行而变化。',
  'Your own part of the GPU’s time cannot be read here: the utilization is the whole GPU’s, the others’ included.':
    '此处无法读出你自己占用的 GPU 时间：显示的是整块 GPU 的利用率，包括其他人的使用。',
  'A MIG slice of a GPU: its memory and compute are your own; the figures are the slice’s.':
    'GPU 的一个 MIG 分区：其显存和算力归你独享；数字是该分区的。',

  // own memory not measurable in a container: memory_known false (figures.ts, statusbar.ts, panel.ts)
  'not measurable here': '此处无法测量',
  'Your own GPU memory cannot be measured inside this container: the driver names processes by the host’s ids. The cap of %1 GB still applies to your kernels.':
    '在此容器内无法测量你自己的 GPU 显存：驱动程序按宿主机的进程 ID 标识进程。%1 GB 的显存上限仍对你的内核有效。',
  'Your own GPU memory cannot be measured inside this container: the driver names processes by the host’s ids.':
    '在此容器内无法测量你自己的 GPU 显存：驱动程序按宿主机的进程 ID 标识进程。'
});
