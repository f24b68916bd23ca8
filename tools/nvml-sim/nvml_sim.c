/*
 * A stand-in NVIDIA driver library: libnvidia-ml.so.1 for machines without a GPU (CI, the demo).
 *
 * pynvml loads it as it loads the real library (dlopen "libnvidia-ml.so.1"), so the project's NVML code
 * (jupyterhub_gpu/gpus/nvml.py) runs on it unchanged. It implements the part of the NVML C API that the
 * project and pynvml's calls need, with NVML's own types, units and error codes; every other function is
 * absent, which pynvml reports as NVML_ERROR_FUNCTION_NOT_FOUND.
 *
 * Its GPUs and their load come from a state file (written by jupyterhub_gpu/gpus/standin.py):
 *   $JUPYTERHUB_GPU_NVML_STATE, default /run/nvidia-sim/nvml.state (where the stand-in container hook
 *   mounts it). One record a line, "kind key=value ... name=rest of the line":
 *     driver version=550.54.15 cuda=12040
 *     gpu index=0 uuid=GPU-... minor=0 total_mib=15360 util=80 mem_util=10 used_mib=4096 temp=45
 *         power_mw=70000 mig=none|off|on max_mig=7 name=Simulated T4
 *     mig parent=GPU-... slot=0 uuid=MIG-... cap=11 total_mib=10240 util=0 used_mib=0 name=Simulated A100 MIG 1g.10gb
 *     process uuid=GPU-...|MIG-... pid=1234 used_mib=2048 sm=40
 *   used_mib absent: the sum of the device's processes. A process's pid is the host's (as the real driver
 *   reports it, also inside a container).
 *
 * Visibility works as with the real driver, by device nodes: a GPU is visible when <dev>/nvidia<minor>
 * exists, a MIG device when <dev>/nvidia-caps/nvidia-cap<cap> exists too (<dev>: $JUPYTERHUB_GPU_NVML_DEV_DIR,
 * default /dev). The stand-in hook creates those nodes for the GPUs a container was given, so NVML inside
 * sees only them; a MIG device is a handle of its parent, which is listed with only its visible slices.
 *
 * No state file: nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED, as on a machine with no driver.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_DEVICES 64
#define MAX_PROCS 256
#define TEXT 96

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t; /* v2 and v3 share this layout */

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

/* One device of the state: a GPU or a MIG device (parent >= 0). Handles point at these. */
typedef struct nvmlDevice_st {
    int used;
    int parent; /* -1: a GPU; else the GPU's slot in devices[] */
    int slot;   /* a MIG device's slot on its parent */
    int index;  /* a GPU's index in the state (its place on the host) */
    int minor, cap;
    char uuid[TEXT], name[TEXT];
    unsigned long long total_mib;
    long long used_mib; /* -1: the sum of the processes */
    unsigned int util, mem_util, temp, power_mw, max_mig;
    int mig; /* 0 none (not MIG-capable), 1 off, 2 on */
} device_t;

typedef struct {
    char uuid[TEXT];
    unsigned int pid, sm;
    unsigned long long used_mib;
} proc_t;

typedef struct {
    device_t dev[MAX_DEVICES];
    int ndev;
    proc_t proc[MAX_PROCS];
    int nproc;
    char driver[TEXT];
    int cuda;
} state_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;             /* nvmlInit's count, as the real library keeps it */
static state_t current;             /* the state as last read: handles point into current.dev */

static const char *state_path(void) {
    const char *p = getenv("JUPYTERHUB_GPU_NVML_STATE");
    return p && *p ? p : "/run/nvidia-sim/nvml.state";
}

static const char *dev_dir(void) {
    const char *p = getenv("JUPYTERHUB_GPU_NVML_DEV_DIR");
    return p && *p ? p : "/dev";
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int gpu_visible(const device_t *d) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/nvidia%d", dev_dir(), d->minor);
    return exists(path);
}

static int mig_visible(const device_t *d) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/nvidia-caps/nvidia-cap%d", dev_dir(), d->cap);
    return exists(path);
}

/* "key=value" in a record; name= takes the rest of the line. */
static const char *field(const char *line, const char *key, char *out, size_t n) {
    size_t klen = strlen(key);
    const char *p = line;
    while ((p = strstr(p, key)) != NULL) {
        if ((p == line || p[-1] == ' ' || p[-1] == '\t') && p[klen] == '=') {
            const char *v = p + klen + 1;
            size_t len = strcmp(key, "name") == 0 ? strcspn(v, "\r\n") : strcspn(v, " \t\r\n");
            if (len >= n) len = n - 1;
            memcpy(out, v, len);
            out[len] = 0;
            return out;
        }
        p += klen;
    }
    return NULL;
}

static long long num(const char *line, const char *key, long long fallback) {
    char buf[32];
    if (!field(line, key, buf, sizeof buf)) return fallback;
    char *end;
    long long v = strtoll(buf, &end, 10);
    return *end ? fallback : v;
}

static int find_uuid(const state_t *s, const char *uuid) {
    for (int i = 0; i < s->ndev; i++)
        if (strcmp(s->dev[i].uuid, uuid) == 0) return i;
    return -1;
}

/* Read the state file into *s: 0, or an NVML error. */
static nvmlReturn_t read_state(state_t *s) {
    FILE *f = fopen(state_path(), "r");
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    memset(s, 0, sizeof *s);
    strcpy(s->driver, "550.54.15");
    s->cuda = 12040;
    char line[1024], buf[TEXT], mig[16];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "driver ", 7) == 0) {
            if (field(line, "version", buf, sizeof buf)) strcpy(s->driver, buf);
            s->cuda = (int)num(line, "cuda", s->cuda);
        } else if ((strncmp(line, "gpu ", 4) == 0 || strncmp(line, "mig ", 4) == 0) && s->ndev < MAX_DEVICES) {
            device_t *d = &s->dev[s->ndev];
            memset(d, 0, sizeof *d);
            d->parent = -1;
            if (!field(line, "uuid", d->uuid, sizeof d->uuid) || !field(line, "name", d->name, sizeof d->name))
                continue;
            if (line[0] == 'm') {
                if (!field(line, "parent", buf, sizeof buf) || (d->parent = find_uuid(s, buf)) < 0) continue;
                d->slot = (int)num(line, "slot", 0);
                d->cap = (int)num(line, "cap", 0);
            } else {
                d->index = (int)num(line, "index", s->ndev);
                d->minor = (int)num(line, "minor", d->index);
                d->max_mig = (unsigned)num(line, "max_mig", 7);
                d->mig = field(line, "mig", mig, sizeof mig) ? (strcmp(mig, "on") == 0 ? 2 : strcmp(mig, "off") == 0 ? 1 : 0) : 0;
            }
            d->total_mib = (unsigned long long)num(line, "total_mib", 16384);
            d->used_mib = num(line, "used_mib", -1);
            d->util = (unsigned)num(line, "util", 0);
            d->mem_util = (unsigned)num(line, "mem_util", 0);
            d->temp = (unsigned)num(line, "temp", 30 + d->util / 2);
            d->power_mw = (unsigned)num(line, "power_mw", 20000 + 2500 * d->util);
            d->used = 1;
            s->ndev++;
        } else if (strncmp(line, "process ", 8) == 0 && s->nproc < MAX_PROCS) {
            proc_t *p = &s->proc[s->nproc];
            if (!field(line, "uuid", p->uuid, sizeof p->uuid)) continue;
            p->pid = (unsigned)num(line, "pid", 0);
            p->used_mib = (unsigned long long)num(line, "used_mib", 0);
            p->sm = (unsigned)num(line, "sm", 0);
            s->nproc++;
        }
    }
    fclose(f);
    return NVML_SUCCESS;
}

/* The live values of the device a handle names (the state file is read again: the driver's figures move). */
static nvmlReturn_t live(const device_t *handle, device_t *out, state_t *s) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (handle < current.dev || handle >= current.dev + MAX_DEVICES || !handle->used)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = read_state(s);
    if (r) return NVML_ERROR_GPU_IS_LOST; /* the driver went away under a running process */
    int i = find_uuid(s, handle->uuid);
    if (i < 0) return NVML_ERROR_GPU_IS_LOST;
    *out = s->dev[i];
    if (out->used_mib < 0) {
        unsigned long long sum = 0;
        for (int p = 0; p < s->nproc; p++)
            if (strcmp(s->proc[p].uuid, out->uuid) == 0) sum += s->proc[p].used_mib;
        /* a GPU's memory counts its MIG devices' processes too */
        for (int m = 0; m < s->ndev; m++)
            if (s->dev[m].parent == i)
                for (int p = 0; p < s->nproc; p++)
                    if (strcmp(s->proc[p].uuid, s->dev[m].uuid) == 0) sum += s->proc[p].used_mib;
        out->used_mib = (long long)sum;
    }
    return NVML_SUCCESS;
}

#define LOCKED(expr)                   \
    do {                               \
        pthread_mutex_lock(&lock);     \
        nvmlReturn_t r_ = (expr);      \
        pthread_mutex_unlock(&lock);   \
        return r_;                     \
    } while (0)

/* ---- init and shutdown ---------------------------------------------------------------------- */
static nvmlReturn_t do_init(void) {
    if (initialized) {
        initialized++;
        return NVML_SUCCESS;
    }
    state_t *s = malloc(sizeof *s);
    if (!s) return NVML_ERROR_UNKNOWN;
    nvmlReturn_t r = read_state(s);
    if (r == NVML_SUCCESS) {
        current = *s;
        initialized = 1;
    }
    free(s);
    return r;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; LOCKED(do_init()); }
nvmlReturn_t nvmlInit_v2(void) { LOCKED(do_init()); }
nvmlReturn_t nvmlInit(void) { LOCKED(do_init()); }

static nvmlReturn_t do_shutdown(void) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized--;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlShutdown(void) { LOCKED(do_shutdown()); }

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ---- system --------------------------------------------------------------------------------- */
static nvmlReturn_t copy_text(char *out, unsigned int length, const char *text) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

static nvmlReturn_t driver_version(char *out, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    return copy_text(out, length, current.driver);
}
nvmlReturn_t nvmlSystemGetDriverVersion(char *out, unsigned int length) { LOCKED(driver_version(out, length)); }

static nvmlReturn_t nvml_version(char *out, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    char text[TEXT + 8];
    snprintf(text, sizeof text, "12.%s", current.driver);
    return copy_text(out, length, text);
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *out, unsigned int length) { LOCKED(nvml_version(out, length)); }

static nvmlReturn_t cuda_version(int *out) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = current.cuda;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *out) { LOCKED(cuda_version(out)); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *out) { LOCKED(cuda_version(out)); }

/* ---- devices: the visible GPUs, in the order of their index ---------------------------------- */
static int visible_gpus(int *slots) {
    int n = 0;
    for (int i = 0; i < current.ndev; i++)
        if (current.dev[i].parent < 0 && gpu_visible(&current.dev[i])) slots[n++] = i;
    return n;
}

static nvmlReturn_t device_count(unsigned int *count) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    int slots[MAX_DEVICES];
    *count = (unsigned)visible_gpus(slots);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { LOCKED(device_count(count)); }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { LOCKED(device_count(count)); }

static nvmlReturn_t handle_by_index(unsigned int index, device_t **out) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    int slots[MAX_DEVICES];
    int n = visible_gpus(slots);
    if (!out || index >= (unsigned)n) return NVML_ERROR_INVALID_ARGUMENT;
    *out = &current.dev[slots[index]];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, device_t **out) { LOCKED(handle_by_index(index, out)); }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, device_t **out) { LOCKED(handle_by_index(index, out)); }

static int visible(const device_t *d) {
    if (d->parent < 0) return gpu_visible(d);
    return gpu_visible(&current.dev[d->parent]) && mig_visible(d);
}

static nvmlReturn_t handle_by_uuid(const char *uuid, device_t **out) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !out) return NVML_ERROR_INVALID_ARGUMENT;
    int i = find_uuid(&current, uuid);
    if (i < 0 || !visible(&current.dev[i])) return NVML_ERROR_NOT_FOUND;
    *out = &current.dev[i];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, device_t **out) { LOCKED(handle_by_uuid(uuid, out)); }

static nvmlReturn_t check(const device_t *d) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!d || d < current.dev || d >= current.dev + MAX_DEVICES || !d->used) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static nvmlReturn_t device_name(device_t *d, char *out, unsigned int length) {
    nvmlReturn_t r = check(d);
    return r ? r : copy_text(out, length, d->name);
}
nvmlReturn_t nvmlDeviceGetName(device_t *d, char *out, unsigned int length) { LOCKED(device_name(d, out, length)); }

static nvmlReturn_t device_uuid(device_t *d, char *out, unsigned int length) {
    nvmlReturn_t r = check(d);
    return r ? r : copy_text(out, length, d->uuid);
}
nvmlReturn_t nvmlDeviceGetUUID(device_t *d, char *out, unsigned int length) { LOCKED(device_uuid(d, out, length)); }

static nvmlReturn_t device_index(device_t *d, unsigned int *out) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent >= 0) return NVML_ERROR_NOT_SUPPORTED; /* as the real one: a MIG handle has no index */
    int slots[MAX_DEVICES];
    int n = visible_gpus(slots);
    for (int i = 0; i < n; i++)
        if (&current.dev[slots[i]] == d) {
            *out = (unsigned)i;
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetIndex(device_t *d, unsigned int *out) { LOCKED(device_index(d, out)); }

static nvmlReturn_t device_minor(device_t *d, unsigned int *out) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent >= 0) return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned)d->minor;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinorNumber(device_t *d, unsigned int *out) { LOCKED(device_minor(d, out)); }

/* ---- live figures --------------------------------------------------------------------------- */
static nvmlReturn_t memory_info(device_t *d, unsigned long long *total, unsigned long long *used) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    state_t *s = malloc(sizeof *s);
    if (!s) return NVML_ERROR_UNKNOWN;
    device_t now;
    r = live(d, &now, s);
    free(s);
    if (r) return r;
    *total = now.total_mib << 20;
    unsigned long long u = (unsigned long long)now.used_mib << 20;
    *used = u > *total ? *total : u;
    return NVML_SUCCESS;
}

static nvmlReturn_t memory_v1(device_t *d, nvmlMemory_t *m) {
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = memory_info(d, &m->total, &m->used);
    if (!r) m->free = m->total - m->used;
    return r;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(device_t *d, nvmlMemory_t *m) { LOCKED(memory_v1(d, m)); }

static nvmlReturn_t memory_v2(device_t *d, nvmlMemory_v2_t *m) {
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != (unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24))) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t r = memory_info(d, &m->total, &m->used);
    if (!r) {
        m->reserved = 0;
        m->free = m->total - m->used;
    }
    return r;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(device_t *d, nvmlMemory_v2_t *m) { LOCKED(memory_v2(d, m)); }

static nvmlReturn_t with_live(device_t *d, device_t *now) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    state_t *s = malloc(sizeof *s);
    if (!s) return NVML_ERROR_UNKNOWN;
    r = live(d, now, s);
    free(s);
    return r;
}

static nvmlReturn_t utilization(device_t *d, nvmlUtilization_t *u) {
    if (!u) return NVML_ERROR_INVALID_ARGUMENT;
    device_t now;
    nvmlReturn_t r = with_live(d, &now);
    if (r) return r;
    if (d->parent >= 0) return NVML_ERROR_NOT_SUPPORTED; /* no utilization counters for a MIG device */
    u->gpu = now.util > 100 ? 100 : now.util;
    u->memory = now.mem_util > 100 ? 100 : now.mem_util;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(device_t *d, nvmlUtilization_t *u) { LOCKED(utilization(d, u)); }

static nvmlReturn_t temperature(device_t *d, int sensor, unsigned int *t) {
    if (!t || sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    device_t now;
    nvmlReturn_t r = with_live(d, &now);
    if (r) return r;
    if (d->parent >= 0) return NVML_ERROR_NOT_SUPPORTED;
    *t = now.temp;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(device_t *d, int sensor, unsigned int *t) { LOCKED(temperature(d, sensor, t)); }

static nvmlReturn_t power(device_t *d, unsigned int *mw) {
    if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
    device_t now;
    nvmlReturn_t r = with_live(d, &now);
    if (r) return r;
    if (d->parent >= 0) return NVML_ERROR_NOT_SUPPORTED;
    *mw = now.power_mw;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(device_t *d, unsigned int *mw) { LOCKED(power(d, mw)); }

/* The state as it is now, for a query on d that lists into a buffer of *count entries: NULL (and *r) on an error. */
static state_t *listing_state(device_t *d, const unsigned int *count, nvmlReturn_t *r) {
    *r = check(d);
    if (*r) return NULL;
    if (!count) {
        *r = NVML_ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    state_t *s = malloc(sizeof *s);
    if (!s) {
        *r = NVML_ERROR_UNKNOWN;
        return NULL;
    }
    device_t now;
    *r = live(d, &now, s);
    if (*r) {
        free(s);
        return NULL;
    }
    return s;
}

/* NVML's answer to a listing of n entries into a buffer of *count: the size needed is always written back. */
static nvmlReturn_t listed(unsigned int *count, unsigned int n, int have_buffer, nvmlReturn_t when_none) {
    unsigned int room = *count;
    *count = n;
    if (n == 0) return when_none;
    if (!have_buffer || room < n) return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

/* The processes on a device (a GPU's own, or a MIG device's), pids as the host sees them. */
static nvmlReturn_t processes(device_t *d, unsigned int *count, nvmlProcessInfo_t *infos) {
    nvmlReturn_t r;
    state_t *s = listing_state(d, count, &r);
    if (!s) return r;
    unsigned int n = 0;
    for (int p = 0; p < s->nproc; p++) {
        int on = strcmp(s->proc[p].uuid, d->uuid) == 0;
        if (!on && d->parent < 0) /* a GPU lists the processes of its MIG devices too */
            for (int m = 0; m < s->ndev; m++)
                if (s->dev[m].parent >= 0 && strcmp(current.dev[s->dev[m].parent].uuid, d->uuid) == 0 &&
                    strcmp(s->dev[m].uuid, s->proc[p].uuid) == 0)
                    on = 1;
        if (!on) continue;
        if (infos && n < *count) {
            infos[n].pid = s->proc[p].pid;
            infos[n].usedGpuMemory = s->proc[p].used_mib << 20;
            infos[n].gpuInstanceId = 0xFFFFFFFFu;
            infos[n].computeInstanceId = 0xFFFFFFFFu;
        }
        n++;
    }
    free(s);
    return listed(count, n, infos != NULL, NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(device_t *d, unsigned int *c, nvmlProcessInfo_t *i) { LOCKED(processes(d, c, i)); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(device_t *d, unsigned int *c, nvmlProcessInfo_t *i) { LOCKED(processes(d, c, i)); }

static unsigned long long now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ull + (unsigned long long)tv.tv_usec;
}

/* Per-process utilization: one sample (stamped now) per process that used the device's SMs since
 * lastSeen; none at all: NVML_ERROR_NOT_FOUND, as the real driver answers. */
static nvmlReturn_t process_utilization(device_t *d, nvmlProcessUtilizationSample_t *samples, unsigned int *count,
                                        unsigned long long last_seen) {
    nvmlReturn_t r;
    state_t *s = listing_state(d, count, &r);
    if (!s) return r;
    unsigned long long stamp = now_us();
    unsigned int n = 0;
    for (int p = 0; p < s->nproc; p++) {
        if (strcmp(s->proc[p].uuid, d->uuid) != 0 || s->proc[p].sm == 0 || stamp <= last_seen) continue;
        if (samples && n < *count) {
            samples[n].pid = s->proc[p].pid;
            samples[n].timeStamp = stamp;
            samples[n].smUtil = s->proc[p].sm > 100 ? 100 : s->proc[p].sm;
            samples[n].memUtil = 0;
            samples[n].encUtil = 0;
            samples[n].decUtil = 0;
        }
        n++;
    }
    free(s);
    return listed(count, n, samples != NULL, NVML_ERROR_NOT_FOUND);
}
nvmlReturn_t nvmlDeviceGetProcessUtilization(device_t *d, nvmlProcessUtilizationSample_t *samples, unsigned int *count,
                                             unsigned long long last_seen) {
    LOCKED(process_utilization(d, samples, count, last_seen));
}

/* ---- MIG ------------------------------------------------------------------------------------ */
static nvmlReturn_t mig_mode(device_t *d, unsigned int *current_mode, unsigned int *pending) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (!current_mode || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent >= 0 || d->mig == 0) return NVML_ERROR_NOT_SUPPORTED;
    *current_mode = *pending = d->mig == 2 ? 1 : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigMode(device_t *d, unsigned int *c, unsigned int *p) { LOCKED(mig_mode(d, c, p)); }

static nvmlReturn_t max_mig(device_t *d, unsigned int *count) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent >= 0 || d->mig == 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = d->max_mig;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(device_t *d, unsigned int *count) { LOCKED(max_mig(d, count)); }

static nvmlReturn_t mig_by_index(device_t *d, unsigned int index, device_t **out) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (!out || d->parent >= 0 || d->mig != 2 || index >= d->max_mig) return NVML_ERROR_INVALID_ARGUMENT;
    int parent = (int)(d - current.dev);
    for (int i = 0; i < current.ndev; i++) {
        device_t *m = &current.dev[i];
        if (m->parent == parent && (unsigned)m->slot == index && mig_visible(m)) {
            *out = m;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND; /* an empty slot, or one this container was not given */
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(device_t *d, unsigned int index, device_t **out) {
    LOCKED(mig_by_index(d, index, out));
}

static nvmlReturn_t is_mig(device_t *d, unsigned int *out) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = d->parent >= 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(device_t *d, unsigned int *out) { LOCKED(is_mig(d, out)); }

static nvmlReturn_t parent_of(device_t *d, device_t **out) {
    nvmlReturn_t r = check(d);
    if (r) return r;
    if (!out || d->parent < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *out = &current.dev[d->parent];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(device_t *d, device_t **out) { LOCKED(parent_of(d, out)); }
