/* Device telemetry (telemetry.h): one thread samples NVML every interval into a snapshot under
 * a lock; the loop copies the snapshot out for reports. NVML's first initialisation can take
 * seconds on a host with many GPUs, and a sick GPU can make a query hang: neither may hold up
 * acceld's start or its loop. */
#include "actors/telemetry.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runtime/alloc.h"

struct dev_telemetry {
  pthread_t thread;
  pthread_mutex_t mu; /* guards what follows */
  pthread_cond_t cv;
  bool stop;
  uint32_t interval_ms;
  char why[192]; /* empty once a sample is in */
  unsigned count;
  dev_gpu_report gpus[DEV_TELEMETRY_MAX_GPUS];
};

static void set_why(dev_telemetry *t, const char *why) {
  pthread_mutex_lock(&t->mu);
  snprintf(t->why, sizeof t->why, "%s", why);
  pthread_mutex_unlock(&t->mu);
}

/* Sleeps for the interval; false once asked to stop. */
static bool nap(dev_telemetry *t) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)t->interval_ms * 1000000u;
  until.tv_sec += (time_t)(ns / 1000000000u);
  until.tv_nsec = (long)(ns % 1000000000u);
  pthread_mutex_lock(&t->mu);
  while (!t->stop && pthread_cond_timedwait(&t->cv, &t->mu, &until) != ETIMEDOUT)
    ;
  bool go_on = !t->stop;
  pthread_mutex_unlock(&t->mu);
  return go_on;
}

/* One sample of every GPU into `next` (which holds the previous one: XID counts go on). */
static void sample(dev_gpu_report next[], unsigned count) {
  for (unsigned i = 0; i < count; i++) {
    int rc = be_nvml_sample(i, &next[i].s);
    next[i].lost = rc == ACCEL_EDEVLOST;
  }
  unsigned gpu[32];
  uint64_t xid[32];
  int n = be_nvml_xids_take(gpu, xid, 32);
  for (int k = 0; k < n; k++) {
    next[gpu[k]].xids++;
    next[gpu[k]].last_xid = xid[k];
  }
}

static void *run(void *arg) {
  dev_telemetry *t = arg;
  unsigned count = 0;
  char why[192];
  if (be_nvml_open(&count, why, sizeof why) != 0) {
    accel_log(ACCEL_LOG_INFO, "telemetry", "no GPU telemetry: %s", why);
    set_why(t, why);
    return NULL;
  }
  if (count > DEV_TELEMETRY_MAX_GPUS)
    count = DEV_TELEMETRY_MAX_GPUS;
  _Static_assert(DEV_TELEMETRY_MAX_GPUS <= 32, "the XID batch covers every GPU");
  dev_gpu_report *next = rt_calloc(DEV_TELEMETRY_MAX_GPUS, sizeof *next);
  if (next == NULL) {
    set_why(t, "out of memory");
    be_nvml_close();
    return NULL;
  }
  for (unsigned i = 0; i < count; i++) {
    next[i].index = i;
    if (be_nvml_identity(i, &next[i].id) != 0)
      snprintf(next[i].id.name, sizeof next[i].id.name, "GPU %u", i);
  }
  accel_log(ACCEL_LOG_INFO, "telemetry", "NVML: %u GPU(s), every %u ms%s", count, t->interval_ms,
            be_nvml_xids_watched() ? "" : " (XID errors not reported by this driver)");
  do {
    sample(next, count);
    pthread_mutex_lock(&t->mu);
    memcpy(t->gpus, next, count * sizeof *next);
    t->count = count;
    t->why[0] = '\0';
    pthread_mutex_unlock(&t->mu);
  } while (nap(t));
  rt_free(next);
  be_nvml_close();
  return NULL;
}

int dev_telemetry_start(dev_world *w, uint32_t interval_ms) {
  if (interval_ms == 0 || w->telemetry)
    return 0;
  dev_telemetry *t = rt_calloc(1, sizeof *t);
  if (t == NULL)
    return ACCEL_ENOMEM;
  t->interval_ms = interval_ms;
  snprintf(t->why, sizeof t->why, "waiting for the first sample");
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  if (pthread_create(&t->thread, NULL, run, t) != 0) {
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    rt_free(t);
    return ACCEL_ESYS;
  }
  w->telemetry = t;
  return 0;
}

void dev_telemetry_stop(dev_world *w) {
  dev_telemetry *t = w->telemetry;
  if (t == NULL)
    return;
  pthread_mutex_lock(&t->mu);
  t->stop = true;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  pthread_join(t->thread, NULL);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  rt_free(t);
  w->telemetry = NULL;
}

/* The devices of this world on the GPU at that PCI address. */
static void match(const dev_world *w, dev_gpu_report *g) {
  g->ndevices = 0;
  if (g->id.pci_bus_id[0] == '\0')
    return;
  for (int n = 1; n < w->nnodes && g->ndevices < (int)(sizeof g->devices / sizeof g->devices[0]);
       n++)
    if (!strcmp(w->nodes[n].info.pci_bus_id, g->id.pci_bus_id))
      g->devices[g->ndevices++] = w->nodes[n].device;
}

int dev_telemetry_read(const dev_world *w, dev_gpu_report out[], int max, char *why,
                       size_t why_len) {
  dev_telemetry *t = w->telemetry;
  if (t == NULL) {
    snprintf(why, why_len, "off");
    return -1;
  }
  pthread_mutex_lock(&t->mu);
  int n = t->why[0] ? -1 : (int)t->count < max ? (int)t->count : max;
  if (n < 0)
    snprintf(why, why_len, "%s", t->why);
  else
    memcpy(out, t->gpus, (size_t)n * sizeof *out);
  pthread_mutex_unlock(&t->mu);
  for (int i = 0; i < n; i++)
    match(w, &out[i]);
  return n;
}
