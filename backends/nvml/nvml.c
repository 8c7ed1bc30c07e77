/* NVML, loaded at run time (nvml.h). The few types and constants below are NVML's public ABI
 * (nvml.h of NVIDIA's driver packages), declared here so the build needs no NVIDIA headers. */
#include "backends/nvml/nvml.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"

typedef int nvml_ret;
typedef struct nvml_device_st *nvml_device;
typedef struct nvml_event_set_st *nvml_event_set;

enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_TEMPERATURE_GPU = 0,
  NVML_CLOCK_SM = 1,
  NVML_CLOCK_MEM = 2,
  NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,
  NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
  NVML_VOLATILE_ECC = 0,
};
#define NVML_EVENT_XID_CRITICAL 0x8ull

typedef struct nvml_utilization {
  unsigned gpu, memory;
} nvml_utilization;

typedef struct nvml_memory {
  unsigned long long total, free, used;
} nvml_memory;

typedef struct nvml_pci_info { /* nvmlPciInfo_t, read by nvmlDeviceGetPciInfo_v3 */
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} nvml_pci_info;

typedef struct nvml_event_data { /* nvmlEventData_t */
  nvml_device device;
  unsigned long long event_type, event_data;
  unsigned gpu_instance_id, compute_instance_id;
} nvml_event_data;

/* clang-format off */
#define NVML_FUNCS(X)                                                                      \
  X(nvmlInit_v2, nvml_ret, (void))                                                         \
  X(nvmlShutdown, nvml_ret, (void))                                                        \
  X(nvmlErrorString, const char *, (nvml_ret))                                             \
  X(nvmlDeviceGetCount_v2, nvml_ret, (unsigned *))                                         \
  X(nvmlDeviceGetHandleByIndex_v2, nvml_ret, (unsigned, nvml_device *))                    \
  X(nvmlDeviceGetName, nvml_ret, (nvml_device, char *, unsigned))                          \
  X(nvmlDeviceGetUUID, nvml_ret, (nvml_device, char *, unsigned))                          \
  X(nvmlDeviceGetPciInfo_v3, nvml_ret, (nvml_device, nvml_pci_info *))                     \
  X(nvmlDeviceGetUtilizationRates, nvml_ret, (nvml_device, nvml_utilization *))            \
  X(nvmlDeviceGetMemoryInfo, nvml_ret, (nvml_device, nvml_memory *))                       \
  X(nvmlDeviceGetTemperature, nvml_ret, (nvml_device, int, unsigned *))                    \
  X(nvmlDeviceGetPowerUsage, nvml_ret, (nvml_device, unsigned *))                          \
  X(nvmlDeviceGetClockInfo, nvml_ret, (nvml_device, int, unsigned *))                      \
  X(nvmlDeviceGetTotalEccErrors, nvml_ret, (nvml_device, int, int, unsigned long long *))  \
  X(nvmlEventSetCreate, nvml_ret, (nvml_event_set *))                                      \
  X(nvmlDeviceRegisterEvents, nvml_ret, (nvml_device, unsigned long long, nvml_event_set)) \
  X(nvmlEventSetWait_v2, nvml_ret, (nvml_event_set, nvml_event_data *, unsigned))          \
  X(nvmlEventSetFree, nvml_ret, (nvml_event_set))
/* clang-format on */

#define NVML_FIELD_(fn, ret, args) ret(*fn) args;
#define NVML_MAX_GPUS 64

static struct {
  void *lib;
  NVML_FUNCS(NVML_FIELD_)
  unsigned count;
  nvml_device dev[NVML_MAX_GPUS];
  nvml_event_set xids; /* NULL: XIDs are not watched */
} nv;

static const char *err_name(nvml_ret r) {
  const char *s = nv.nvmlErrorString ? nv.nvmlErrorString(r) : NULL;
  return s ? s : "unknown error";
}

__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  be_nvml_close();
  return ACCEL_ENOTSUP;
}

static int load(char *why, size_t len) {
  const char *path = getenv("ACCEL_NVML_LIBRARY");
  if (path == NULL || *path == '\0')
    path = "libnvidia-ml.so.1";
  nv.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (nv.lib == NULL) {
    const char *e = dlerror();
    return fail(why, len, "no NVML: %s", e ? e : path);
  }
#define NVML_LOOKUP_(fn, ret, args)                                                                \
  *(void **)&nv.fn = dlsym(nv.lib, #fn);                                                           \
  if (nv.fn == NULL)                                                                               \
    return fail(why, len, "%s lacks %s (NVIDIA driver too old)", path, #fn);
  NVML_FUNCS(NVML_LOOKUP_)
#undef NVML_LOOKUP_
  return 0;
}

/* XIDs come as events; a GPU that cannot report them (NOT_SUPPORTED) is left out. */
static void watch_xids(void) {
  if (nv.nvmlEventSetCreate(&nv.xids) != NVML_SUCCESS) {
    nv.xids = NULL;
    return;
  }
  bool any = false;
  for (unsigned i = 0; i < nv.count; i++)
    any |= nv.nvmlDeviceRegisterEvents(nv.dev[i], NVML_EVENT_XID_CRITICAL, nv.xids) == NVML_SUCCESS;
  if (!any) {
    nv.nvmlEventSetFree(nv.xids);
    nv.xids = NULL;
  }
}

int be_nvml_open(unsigned *count, char *why, size_t why_len) {
  if (nv.lib) {
    *count = nv.count;
    return 0;
  }
  int rc = load(why, why_len);
  if (rc != 0)
    return rc;
  nvml_ret r = nv.nvmlInit_v2();
  if (r != NVML_SUCCESS) {
    char code[16];
    snprintf(code, sizeof code, "%d", r);
    const char *name = err_name(r);
    nv.nvmlShutdown = NULL; /* nothing to shut down */
    return fail(why, why_len, "nvmlInit_v2: %s (NVML error %s)", name, code);
  }
  unsigned n = 0;
  r = nv.nvmlDeviceGetCount_v2(&n);
  if (r != NVML_SUCCESS)
    return fail(why, why_len, "nvmlDeviceGetCount_v2: %s", err_name(r));
  nv.count = 0;
  for (unsigned i = 0; i < n && nv.count < NVML_MAX_GPUS; i++)
    if (nv.nvmlDeviceGetHandleByIndex_v2(i, &nv.dev[nv.count]) == NVML_SUCCESS)
      nv.count++; /* a GPU NVML cannot open (no permission) is left out */
  watch_xids();
  *count = nv.count;
  return 0;
}

void be_nvml_close(void) {
  if (nv.lib == NULL)
    return;
  if (nv.xids && nv.nvmlEventSetFree)
    nv.nvmlEventSetFree(nv.xids);
  if (nv.nvmlShutdown)
    nv.nvmlShutdown();
  dlclose(nv.lib);
  memset(&nv, 0, sizeof nv);
}

bool be_pci_bus_id_normalize(const char *in, char *out, size_t out_len) {
  unsigned domain, bus, dev, fn;
  int used = 0;
  if (in == NULL || sscanf(in, "%x:%x:%x.%x%n", &domain, &bus, &dev, &fn, &used) != 4 ||
      in[used] != '\0' || bus > 0xff || dev > 0x1f || fn > 7)
    return false;
  return snprintf(out, out_len, "%04x:%02x:%02x.%x", domain, bus, dev, fn) < (int)out_len;
}

int be_nvml_identity(unsigned index, be_gpu_identity *out) {
  memset(out, 0, sizeof *out);
  if (index >= nv.count)
    return ACCEL_EINVAL;
  nvml_device d = nv.dev[index];
  nvml_pci_info pci = {0};
  if (nv.nvmlDeviceGetName(d, out->name, sizeof out->name) != NVML_SUCCESS)
    snprintf(out->name, sizeof out->name, "GPU %u", index);
  if (nv.nvmlDeviceGetUUID(d, out->uuid, sizeof out->uuid) != NVML_SUCCESS)
    out->uuid[0] = '\0';
  if (nv.nvmlDeviceGetPciInfo_v3(d, &pci) != NVML_SUCCESS ||
      !be_pci_bus_id_normalize(pci.bus_id, out->pci_bus_id, sizeof out->pci_bus_id))
    out->pci_bus_id[0] = '\0';
  out->name[sizeof out->name - 1] = out->uuid[sizeof out->uuid - 1] = '\0';
  return 0;
}

static int64_t ull_or_unknown(nvml_ret r, unsigned long long v) {
  return r == NVML_SUCCESS ? (int64_t)v : -1;
}

static int uint_or_unknown(nvml_ret r, unsigned v) {
  return r == NVML_SUCCESS ? (int)v : -1;
}

int be_nvml_sample(unsigned index, be_gpu_sample *out) {
  if (index >= nv.count)
    return ACCEL_EINVAL;
  nvml_device d = nv.dev[index];
  nvml_utilization u;
  nvml_memory m;
  unsigned temp, power, sm, mem;
  unsigned long long ce, ue;
  nvml_ret ru = nv.nvmlDeviceGetUtilizationRates(d, &u);
  if (ru == NVML_ERROR_GPU_IS_LOST)
    return ACCEL_EDEVLOST;
  nvml_ret rm = nv.nvmlDeviceGetMemoryInfo(d, &m);
  *out = (be_gpu_sample){
      .util_gpu_pct = ru == NVML_SUCCESS ? (int)u.gpu : -1,
      .util_mem_pct = ru == NVML_SUCCESS ? (int)u.memory : -1,
      .mem_used = rm == NVML_SUCCESS ? (int64_t)m.used : -1,
      .mem_total = rm == NVML_SUCCESS ? (int64_t)m.total : -1,
  };
  nvml_ret r = nv.nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &temp);
  out->temp_c = uint_or_unknown(r, temp);
  r = nv.nvmlDeviceGetPowerUsage(d, &power);
  out->power_mw = r == NVML_SUCCESS ? (int64_t)power : -1;
  r = nv.nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &sm);
  out->sm_clock_mhz = uint_or_unknown(r, sm);
  r = nv.nvmlDeviceGetClockInfo(d, NVML_CLOCK_MEM, &mem);
  out->mem_clock_mhz = uint_or_unknown(r, mem);
  r = nv.nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &ce);
  out->ecc_corrected = ull_or_unknown(r, ce);
  r = nv.nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ue);
  out->ecc_uncorrected = ull_or_unknown(r, ue);
  return 0;
}

bool be_nvml_xids_watched(void) {
  return nv.xids != NULL;
}

int be_nvml_xids_take(unsigned gpu[], uint64_t xid[], int max) {
  int n = 0;
  nvml_event_data e;
  while (nv.xids && n < max && nv.nvmlEventSetWait_v2(nv.xids, &e, 0) == NVML_SUCCESS) {
    if (!(e.event_type & NVML_EVENT_XID_CRITICAL))
      continue;
    for (unsigned i = 0; i < nv.count; i++)
      if (nv.dev[i] == e.device) {
        gpu[n] = i;
        xid[n++] = e.event_data;
        break;
      }
  }
  return n;
}
