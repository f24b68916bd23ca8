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
  GPUs: 'GPU 列表',
  'Open TensorBoard': '打开 TensorBoard',
  'Stop my server (stop billing)': '停止我的服务器（停止计费）',
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
  'Click to show GPU usage and cost.': '点击查看 GPU 用量和费用。'
});
