/**
 * The shapes of the server extension's stats API (`GET gpu/api/v1/stats`).
 *
 * Money and budget amounts are decimal strings, exactly as the ledger holds them:
 * they are formatted as text and never turned into floating-point numbers.
 */

/** One GPU visible to this server, as last sampled. */
export interface IGpu {
  index: string;
  uuid: string;
  name: string;
  utilization_percent: number | null;
  memory_used_mib: number | null;
  memory_total_mib: number | null;
  temperature_c: number | null;
  power_w: number | null;
  /**
   * The unit: `"1/4"` for a time-sliced share of a GPU, `"mig:1g.10gb"` for a MIG slice,
   * `""` (or absent, from an older server) for a whole GPU. On a share or slice
   * `memory_used_mib` is this server's own memory and `memory_total_mib` its cap.
   */
  share?: string;
  /** What `utilization_percent` measures: `"own"` (this server's processes) or `"gpu"` (the whole GPU). */
  scope?: 'own' | 'gpu';
  /** The whole physical GPU's figures (on a share: all its servers together), when known. */
  gpu_utilization_percent?: number | null;
  gpu_memory_used_mib?: number | null;
  gpu_memory_total_mib?: number | null;
  /** How many servers share the GPU, when known. */
  shared_by?: number | null;
  /** This server's processes on the GPU, when known. */
  processes?: number | null;
  /**
   * False where this server's own memory cannot be measured (in a container the driver names
   * processes by the host's ids): `memory_used_mib` is then 0 and no measurement. Absent or
   * true otherwise.
   */
  memory_known?: boolean;
}

/** One point of the session's usage history (all GPUs of the session together). */
export interface IHistoryPoint {
  t: string;
  utilization_percent: number | null;
  memory_used_mib: number | null;
  memory_total_mib: number | null;
}

/** The billed session this server belongs to. */
export interface ISession {
  id: string;
  profile: string;
  display_name: string;
  gpu_model: string | null;
  started: string;
  rate_per_minute: string;
  currency: string;
  currency_symbol: string;
  minutes_billed: number;
  cost: string;
  budget_remaining: string | null;
  /** `"money"` or `"gpu_hours"`. */
  budget_unit: string | null;
  budget_minutes_left: number | null;
}

/** A message from the gpu service for this user (budget threshold, idle stop, memory advice). */
export interface INotice {
  id: number;
  kind: string;
  /** `"info"`, `"warning"` or `"error"`. */
  level: string;
  message: string;
  created: string;
}

/** The whole answer of the stats endpoint. */
export interface IStats {
  simulated: boolean;
  /** Why there are no GPU figures (CPU-only profile, NVML unavailable), else null. */
  reason: string | null;
  /** When the GPUs were last read; null when there are none. */
  sampled_at: string | null;
  interval_seconds: number;
  gpus: IGpu[];
  history: IHistoryPoint[];
  session: ISession | null;
  notices: INotice[];
  service_available: boolean;
  tensorboard_url: string | null;
}
