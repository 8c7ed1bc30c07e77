/* A stand-in for NVIDIA's management library (libnvidia-ml.so.1), loaded by acceld through
 * ACCEL_NVML_LIBRARY: two GPUs with readings that follow from their index, so the telemetry
 * test can check each number end to end. GPU 1 has no ECC counter for uncorrected errors
 * (NOT_SUPPORTED, which reports must leave out rather than show as 0) and reports one XID 79
 * ("fallen off the bus") once. FAKE_NVML_INIT_ERROR=N makes nvmlInit_v2 fail with N. The
 * signatures are NVML's public ones (nvml.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The exported functions' prototypes are NVML's header, which the build does not have. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

#define API __attribute__((visibility("default")))

typedef int nvml_ret;
typedef struct fake_gpu *nvml_device;
typedef struct fake_set *nvml_event_set;

struct fake_gpu {
  unsigned index;
  unsigned long long events; /* registered */
};
struct fake_set {
  int xids_left;
};

static struct fake_gpu gpus[2] = {{0, 0}, {1, 0}};
static struct fake_set the_set;
static int inits;

typedef struct {
  unsigned gpu, memory;
} utilization;
typedef struct {
  unsigned long long total, free, used;
} memory;
typedef struct {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} pci_info;
typedef struct {
  nvml_device device;
  unsigned long long event_type, event_data;
  unsigned gpu_instance_id, compute_instance_id;
} event_data;

API nvml_ret nvmlInit_v2(void) {
  const char *e = getenv("FAKE_NVML_INIT_ERROR");
  if (e && *e)
    return atoi(e);
  inits++;
  return 0;
}
API nvml_ret nvmlShutdown(void) {
  return inits-- > 0 ? 0 : 1; /* NVML_ERROR_UNINITIALIZED */
}
API const char *nvmlErrorString(nvml_ret r) {
  return r == 9 ? "Driver Not Loaded" : r == 3 ? "Not Supported" : "Unknown Error";
}
API nvml_ret nvmlDeviceGetCount_v2(unsigned *n) {
  *n = 2;
  return 0;
}
API nvml_ret nvmlDeviceGetHandleByIndex_v2(unsigned i, nvml_device *d) {
  if (i >= 2)
    return 2;
  *d = &gpus[i];
  return 0;
}
API nvml_ret nvmlDeviceGetName(nvml_device d, char *s, unsigned len) {
  snprintf(s, len, "Fake GPU %u", d->index);
  return 0;
}
API nvml_ret nvmlDeviceGetUUID(nvml_device d, char *s, unsigned len) {
  snprintf(s, len, "GPU-0000000%u-fake-4a6e-8c6d-000000000000", d->index);
  return 0;
}
API nvml_ret nvmlDeviceGetPciInfo_v3(nvml_device d, pci_info *p) {
  memset(p, 0, sizeof *p);
  p->bus = d->index ? 0x86 : 0x3b;
  snprintf(p->bus_id, sizeof p->bus_id, "00000000:%02X:00.0", p->bus);
  snprintf(p->bus_id_legacy, sizeof p->bus_id_legacy, "0000:%02X:00.0", p->bus);
  return 0;
}
API nvml_ret nvmlDeviceGetUtilizationRates(nvml_device d, utilization *u) {
  u->gpu = 37 + d->index;
  u->memory = 12 + d->index;
  return 0;
}
API nvml_ret nvmlDeviceGetMemoryInfo(nvml_device d, memory *m) {
  m->total = 80ull << 30;
  m->used = (1ull + d->index) << 30;
  m->free = m->total - m->used;
  return 0;
}
API nvml_ret nvmlDeviceGetTemperature(nvml_device d, int sensor, unsigned *t) {
  *t = 41 + d->index;
  return sensor == 0 ? 0 : 2;
}
API nvml_ret nvmlDeviceGetPowerUsage(nvml_device d, unsigned *mw) {
  *mw = 123456 + d->index;
  return 0;
}
API nvml_ret nvmlDeviceGetClockInfo(nvml_device d, int type, unsigned *mhz) {
  *mhz = type == 1 ? 1980 : type == 2 ? 2619 : 0;
  return type == 1 || type == 2 ? 0 : 2;
}
API nvml_ret nvmlDeviceGetTotalEccErrors(nvml_device d, int type, int counter,
                                         unsigned long long *n) {
  if (type == 1 && d->index == 1)
    return 3; /* NOT_SUPPORTED */
  *n = type == 0 ? 3 + d->index : d->index;
  return counter == 0 ? 0 : 2;
}
API nvml_ret nvmlEventSetCreate(nvml_event_set *s) {
  the_set.xids_left = 1;
  *s = &the_set;
  return 0;
}
API nvml_ret nvmlDeviceRegisterEvents(nvml_device d, unsigned long long types, nvml_event_set s) {
  d->events |= types;
  return 0;
}
API nvml_ret nvmlEventSetWait_v2(nvml_event_set s, event_data *e, unsigned timeout_ms) {
  if (s->xids_left == 0 || !(gpus[1].events & 0x8))
    return 10; /* TIMEOUT */
  s->xids_left--;
  memset(e, 0, sizeof *e);
  e->device = &gpus[1];
  e->event_type = 0x8;
  e->event_data = 79;
  return 0;
}
API nvml_ret nvmlEventSetFree(nvml_event_set s) {
  return 0;
}
