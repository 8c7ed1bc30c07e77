/* Device telemetry through acceld: a fake NVML (fake_nvml.c, every reading known) is read
 * into the status JSON, the text of `accelctl devices`/`status` and /metrics under
 * dcgm-exporter's names; a missing or failing NVML says why; busy time is measured for the
 * CPU device; the interval's limits. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "util.h"

static char out[1 << 17];
static char text[1 << 17];

/* acceld with these backends, this NVML library and its environment, `extra` in [devices];
 * metrics on a free port. */
static int start_on(td_daemon *d, const char *backends, const char *library, const char *init_error,
                    const char *extra) {
  int port = td_free_port();
  char conf[512];
  snprintf(conf, sizeof conf,
           "[devices]\ncpu_devices = 1\n%s\n[metrics]\nlisten = http://127.0.0.1:%d\n",
           extra ? extra : "", port);
  setenv("ACCEL_NVML_LIBRARY", library, 1);
  if (init_error)
    setenv("FAKE_NVML_INIT_ERROR", init_error, 1);
  else
    unsetenv("FAKE_NVML_INIT_ERROR");
  td_prepare(d);
  td_write_config(d, conf);
  td_start(d, "--backends", backends, NULL);
  return port;
}

static int start(td_daemon *d, const char *library, const char *init_error, const char *extra) {
  return start_on(d, "cpu", library, init_error, extra);
}

static const char *fake_library(void) {
  const char *p = getenv("FAKE_NVML");
  if (p == NULL)
    TEST_FAIL("FAKE_NVML is not set (meson sets it)");
  return p;
}

/* The status JSON once the telemetry has an answer (a sample, or why there is none). */
static const char *status_when_sampled(td_daemon *d) {
  for (int i = 0; i < 200; i++) {
    CHECK_EQ(td_ctl(out, sizeof out, "--url", d->url, "status", "--json", NULL), 0);
    if (strstr(out, "\"why\":\"waiting for the first sample\"") == NULL)
      return out;
    usleep(20000);
  }
  TEST_FAIL("no telemetry sample within 4 s: %s", out);
}

/* The JSON object of GPU `index` in the status (up to its closing brace; no nesting there). */
static const char *gpu_json(const char *status, int index, char *buf, size_t len) {
  char key[32];
  snprintf(key, sizeof key, "{\"index\":%d,\"name\":\"Fake GPU", index);
  const char *s = strstr(status, key);
  CHECK(s != NULL);
  const char *e = strchr(s, '}');
  CHECK(e != NULL);
  CHECK_LT((size_t)(e - s), len);
  memcpy(buf, s, (size_t)(e - s + 1));
  buf[e - s + 1] = '\0';
  return buf;
}

#define HAS(hay, needle)                                                                           \
  do {                                                                                             \
    if (strstr((hay), (needle)) == NULL)                                                           \
      TEST_FAIL("missing %s in:\n%s", (needle), (hay));                                            \
  } while (0)

TEST(nvml_readings_reach_status_json) {
  td_daemon d;
  start(&d, fake_library(), NULL, NULL);
  const char *s = status_when_sampled(&d);
  HAS(s, "\"telemetry\":{\"source\":\"nvml\",\"why\":null,\"gpus\":[");
  char g[1024];
  gpu_json(s, 0, g, sizeof g);
  HAS(g, "\"uuid\":\"GPU-00000000-fake-4a6e-8c6d-000000000000\"");
  HAS(g, "\"pci_bus_id\":\"0000:3b:00.0\""); /* normalized from NVML's 00000000:3B:00.0 */
  HAS(g, "\"devices\":[]");                  /* no accel device runs on it */
  HAS(g, "\"utilization_gpu_pct\":37,\"utilization_memory_pct\":12");
  HAS(g, "\"memory_used\":1073741824,\"memory_total\":85899345920");
  HAS(g, "\"temperature_c\":41,\"power_w\":123.456,\"sm_clock_mhz\":1980");
  HAS(g, "\"memory_clock_mhz\":2619,\"ecc_corrected\":3,\"ecc_uncorrected\":0");
  HAS(g, "\"xid_errors\":0,\"last_xid\":0");
  gpu_json(s, 1, g, sizeof g);
  HAS(g, "\"pci_bus_id\":\"0000:86:00.0\"");
  HAS(g, "\"temperature_c\":42,\"power_w\":123.457");
  HAS(g, "\"ecc_corrected\":4,\"ecc_uncorrected\":null"); /* not supported: not a 0 */
  HAS(g, "\"xid_errors\":1,\"last_xid\":79");
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(nvml_readings_reach_text_and_metrics) {
  td_daemon d;
  int port = start(&d, fake_library(), NULL, NULL);
  status_when_sampled(&d);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "devices", NULL), 0);
  HAS(out, "Fake GPU 1 (0000:86:00.0, not served by accel):\n  gpu 1: 38% busy, 13% memory "
           "busy, 2.00 GiB of 80.0 GiB, 42 C, 123.5 W, SM 1980 MHz, memory 2619 MHz, ECC 4 "
           "corrected 0 uncorrected, XID 1 (last 79)\n");
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", NULL), 0);
  HAS(out, "gpu 0: 37% busy");
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "devices", "--json", NULL), 0);
  HAS(out, "],\"telemetry\":{\"source\":\"nvml\",\"why\":null,\"gpus\":[{\"index\":0,");
  const char *m = td_http_get(port, "/metrics");
  HAS(m, "accel_gpu_telemetry_up 1\n");
  HAS(m, "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n");
  HAS(m, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-00000000-fake-4a6e-8c6d-000000000000\","
         "pci_bus_id=\"0000:3b:00.0\",modelName=\"Fake GPU 0\",accel_device=\"\"} 37\n");
  HAS(m, "DCGM_FI_DEV_FB_USED{gpu=\"1\"");
  HAS(m, "} 2048.000\n# HELP DCGM_FI_DEV_FB_FREE"); /* MiB, as dcgm-exporter */
  HAS(m, "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\"");
  HAS(m, "} 123.456\n");
  HAS(m, "DCGM_FI_DEV_XID_ERRORS{gpu=\"1\"");
  HAS(m, "accel_gpu_xid_errors_total{gpu=\"1\"");
  /* GPU 1 has no uncorrected-ECC counter: its series is left out, GPU 0's is there */
  HAS(m, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=\"0\"");
  CHECK(strstr(m, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=\"1\"") == NULL);
  HAS(m, "accel_device_busy_seconds_total{device=\"0\"} ");
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(no_nvml_says_why) {
  td_daemon d;
  int port = start(&d, "/nonexistent/libnvidia-ml.so.1", NULL, NULL);
  const char *s = status_when_sampled(&d);
  HAS(s, "\"telemetry\":{\"source\":\"nvml\",\"why\":\"no NVML: /nonexistent/libnvidia-ml.so.1");
  HAS(s, "\"gpus\":[]}");
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "devices", NULL), 0);
  HAS(out, "gpu telemetry: no NVML: /nonexistent/libnvidia-ml.so.1");
  const char *m = td_http_get(port, "/metrics");
  HAS(m, "accel_gpu_telemetry_up 0\n");
  CHECK(strstr(m, "DCGM_FI_DEV_GPU_UTIL") == NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(nvml_init_failure_names_the_cause) {
  td_daemon d;
  start(&d, fake_library(), "9", NULL);
  const char *s = status_when_sampled(&d);
  HAS(s, "\"why\":\"nvmlInit_v2: Driver Not Loaded (NVML error 9)\"");
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(interval_zero_turns_telemetry_off_and_its_limits) {
  td_daemon d;
  start(&d, fake_library(), NULL, "telemetry_interval_ms = 0");
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", "--json", NULL), 0);
  HAS(out, "\"telemetry\":{\"source\":\"nvml\",\"why\":\"off\",\"gpus\":[]}");
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
  /* 100 ms is the shortest interval; 99 is refused at start, naming the key */
  start(&d, fake_library(), NULL, "telemetry_interval_ms = 100");
  CHECK(strstr(status_when_sampled(&d), "\"why\":null") != NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
  td_prepare(&d);
  td_write_config(&d, "[devices]\ntelemetry_interval_ms = 99\n");
  CHECK(td_start_expect_exit(&d, NULL) != 0);
  HAS(td_log(&d), "telemetry_interval_ms");
  td_cleanup(&d);
}

/* Field `key` (a number) of device `index` in the status JSON. */
static double device_field(const char *status, int index, const char *key) {
  char want[48];
  snprintf(want, sizeof want, "{\"index\":%d,\"name\":", index);
  const char *s = strstr(status, want);
  CHECK(s != NULL);
  char k[48];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *v = strstr(s, k);
  CHECK(v != NULL);
  return strtod(v + strlen(k), NULL);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

TEST(busy_time_is_measured_for_the_cpu_device) {
  td_daemon d;
  start(&d, fake_library(), NULL, NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", "--json", NULL), 0);
  double before = device_field(out, 0, "busy_s");
  CHECK(before >= 0.0 && before < 0.5); /* nothing ran yet */
  accel_ctx *ctx;
  CHECK_EQ(accel_open(&ctx, d.url), 0);
  accel_buffer buf;
  size_t n = 4u << 20;
  CHECK_EQ(accel_buffer_create(ctx, ACCEL_F32, n, &buf), 0);
  double t0 = now_s();
  for (int i = 0; i < 40; i++) {
    accel_future *f;
    CHECK_EQ(accel_fill(ctx, 0, buf, (float)i, &f), 0);
    CHECK_EQ(accel_future_wait(f, -1), 0);
    accel_future_release(f);
  }
  double wall = now_s() - t0;
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", "--json", NULL), 0);
  double busy = device_field(out, 0, "busy_s") - before;
  /* 40 fills of 16 MiB: busy for some of the time, never longer than it took */
  CHECK(busy > 0.0);
  CHECK(busy <= wall + 0.01);
  accel_buffer_destroy(ctx, buf);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* Work on a queue for over a second is listed by status (JSON and text, so by top too) with
 * its device, queue, op and client, until it ends. Sixteen f64 gemms of n = 2500 (500 GFLOP)
 * keep the CPU device's blas queue busy for seconds on any machine this runs on (150 GFLOP/s on
 * the 2 cores it was written on), and each of them is on the queue from the start. */
TEST(long_work_is_shown_in_progress) {
  td_daemon d;
  start(&d, fake_library(), NULL, NULL);
  accel_ctx *ctx;
  char url[200];
  snprintf(url, sizeof url, "%s?name=long-worker", d.url);
  CHECK_EQ(accel_open(&ctx, url), 0);
  size_t n = 2500;
  accel_buffer a, b, c;
  CHECK_EQ(accel_buffer_create(ctx, ACCEL_F64, n * n, &a), 0);
  CHECK_EQ(accel_buffer_create(ctx, ACCEL_F64, n * n, &b), 0);
  CHECK_EQ(accel_buffer_create(ctx, ACCEL_F64, n * n, &c), 0);
  accel_future *f[16];
  for (int i = 0; i < 16; i++)
    CHECK_EQ(accel_gemm(ctx, 0, ACCEL_NO_TRANS, ACCEL_NO_TRANS, n, n, n, 1.0, a, n, b, n, 0.0, c, n,
                        ACCEL_MATH_DEFAULT, &f[i]),
             0);
  bool seen = false;
  while (!seen && accel_future_poll(f[15]) == ACCEL_EAGAIN) {
    CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", "--json", NULL), 0);
    seen = strstr(out, "\"in_progress\":[{\"device\":0,\"queue\":\"blas\",\"what\":\"gemm\"") !=
           NULL;
    if (seen) {
      HAS(out, "\"client\":\"long-worker\"}");
      CHECK_EQ(td_ctl(text, sizeof text, "--url", d.url, "status", NULL), 0);
      HAS(text, "in progress: device 0 blas queue: gemm for ");
      HAS(text, " s (client long-worker)\n");
    }
    usleep(100000);
  }
  CHECK(seen);
  for (int i = 0; i < 16; i++) {
    CHECK_EQ(accel_future_wait(f[i], -1), 0);
    accel_future_release(f[i]);
  }
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", "--json", NULL), 0);
  HAS(out, "\"in_progress\":[]"); /* done: gone from the list */
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* ---- busy time of acceld's loop and of its workers' link threads ---- */

/* The value of the series that `prefix` names (its name and labels, then a space). */
static double series_value(const char *m, const char *prefix) {
  const char *s = strstr(m, prefix);
  if (s == NULL)
    TEST_FAIL("missing %s in:\n%s", prefix, m);
  return strtod(s + strlen(prefix), NULL);
}

/* The first OpenCL device of ctx, or ACCEL_DEVICE_ANY. */
static accel_device opencl_device(accel_ctx *ctx) {
  for (accel_device dev = 0; dev < accel_device_count(ctx); dev++) {
    struct accel_device_info info;
    CHECK_EQ(accel_device_info(ctx, dev, &info), 0);
    if (strcmp(info.backend, "opencl") == 0)
      return dev;
  }
  return ACCEL_DEVICE_ANY;
}

/* The series of the opencl worker's first link in m (its name and labels, then a space),
 * checked to name an accel-device process of acceld's. */
static void worker_link_series(const td_daemon *d, const char *m, char *prefix, size_t len) {
  static const char name[] = "accel_worker_link_busy_seconds_total{backend=\"opencl\",pid=\"";
  const char *s = strstr(m, name);
  if (s == NULL)
    TEST_FAIL("no opencl worker link in:\n%s", m);
  int pid = atoi(s + strlen(name));
  snprintf(prefix, len, "%s%d\",link=\"0\"} ", name, pid);
  char path[64], stat[256] = "";
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  CHECK(fgets(stat, sizeof stat, f) != NULL);
  fclose(f);
  int ppid = 0;
  const char *paren = strrchr(stat, ')');
  CHECK(paren != NULL && sscanf(paren + 1, " %*c %d", &ppid) == 1);
  CHECK(strstr(stat, "(accel-device)") != NULL);
  CHECK_EQ(ppid, (int)d->pid);
}

/* acceld (its metrics port returned) with PoCL's device in a worker, a client on it, and a
 * buffer there filled once (the worker starts, builds its kernels); 0 without an OpenCL
 * device (acceld stopped again: the caller skips). */
static int start_pocl_worker(td_daemon *d, accel_ctx **ctx, accel_device *dev, accel_buffer *buf) {
  int port = start_on(d, "cpu,opencl", fake_library(), NULL, "workers = opencl");
  CHECK_EQ(accel_open(ctx, d->url), 0);
  *dev = opencl_device(*ctx);
  if (*dev == ACCEL_DEVICE_ANY) {
    accel_close(*ctx);
    CHECK_EQ(td_stop(d), 0);
    td_cleanup(d);
    return 0;
  }
  CHECK_EQ(accel_buffer_create(*ctx, ACCEL_U32, 256, buf), 0);
  accel_future *f;
  CHECK_EQ(accel_fill_u32(*ctx, *dev, *buf, 1, &f), 0);
  CHECK_EQ(accel_future_wait(f, -1), 0);
  accel_future_release(f);
  return port;
}

typedef struct busy_times {
  double loop, link, at; /* seconds; at: when the metrics were read, at the latest */
} busy_times;

static busy_times busy_now(int port, const char *link_series) {
  const char *m = td_http_get(port, "/metrics");
  busy_times t = {series_value(m, "accel_loop_busy_seconds_total{loop=\"0\"} "),
                  series_value(m, link_series), now_s()};
  return t;
}

/* 2000 fills waited for one at a time on PoCL's device in its worker: acceld's loop and the
 * worker's link thread are busy for some of that time (each op costs both at least a
 * microsecond), never for more than the time between the two reads; a second without ops adds
 * little to either (they wait, polling or asleep). */
TEST(loop_and_worker_link_busy_times_are_in_metrics) {
  td_daemon d;
  accel_ctx *ctx;
  accel_device dev;
  accel_buffer buf;
  int port = start_pocl_worker(&d, &ctx, &dev, &buf);
  if (port == 0)
    TEST_SKIP("no OpenCL device");
  accel_future *f;
  char series[160];
  worker_link_series(&d, td_http_get(port, "/metrics"), series, sizeof series);
  double t0 = now_s();
  busy_times before = busy_now(port, series);
  for (uint32_t i = 0; i < 2000; i++) {
    CHECK_EQ(accel_fill_u32(ctx, dev, buf, i, &f), 0);
    CHECK_EQ(accel_future_wait(f, -1), 0);
    accel_future_release(f);
  }
  busy_times after = busy_now(port, series);
  double loop = after.loop - before.loop, link = after.link - before.link, wall = after.at - t0;
  printf("# 2000 fills in %.3f s: loop busy %.3f s, worker link busy %.3f s\n", wall, loop, link);
  CHECK(loop > 0.002 && loop <= wall + 0.01);
  CHECK(link > 0.002 && link <= wall + 0.01);
  test_sleep_ms(1000);
  busy_times idle = busy_now(port, series);
  printf("# then 1 s without ops: loop busy %.3f s, worker link busy %.3f s\n",
         idle.loop - after.loop, idle.link - after.link);
  CHECK(idle.loop - after.loop < 0.25);
  CHECK(idle.link - after.link < 0.25);
  CHECK_EQ(accel_buffer_destroy(ctx, buf), 0);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* The opencl worker's link-0 counts of completions and of events behind them. */
typedef struct done_counts {
  double completions, events;
} done_counts;

static done_counts done_now(int port, const char *busy_series) {
  const char *m = td_http_get(port, "/metrics");
  const char *labels = strchr(busy_series, '{'); /* the link's labels, then a space */
  char c[200], e[200];
  snprintf(c, sizeof c, "accel_worker_completions_total%s", labels);
  snprintf(e, sizeof e, "accel_worker_completion_events_total%s", labels);
  return (done_counts){series_value(m, c), series_value(m, e)};
}

/* PoCL's device in its worker (false without one), `grouping` as ACCEL_WORKER_GROUP says in
 * acceld's (and so its worker's) environment: 100 fills waited for one at a time get an event each
 * (nothing follows them on the link); 1000 fills in flight at once are answered with fewer events
 * than completions when grouping (bursts share one), one each when not. */
static bool completions_and_events(bool grouping) {
  const char *was = getenv("ACCEL_WORKER_GROUP");
  char keep[16];
  snprintf(keep, sizeof keep, "%s", was ? was : "");
  CHECK_EQ(setenv("ACCEL_WORKER_GROUP", grouping ? "1" : "0", 1), 0);
  td_daemon d;
  accel_ctx *ctx;
  accel_device dev;
  accel_buffer buf;
  int port = start_pocl_worker(&d, &ctx, &dev, &buf);
  CHECK_EQ(was ? setenv("ACCEL_WORKER_GROUP", keep, 1) : unsetenv("ACCEL_WORKER_GROUP"), 0);
  if (port == 0)
    return false;
  enum { FLOOD = 1000 };
  accel_future *f[FLOOD];
  char series[160];
  worker_link_series(&d, td_http_get(port, "/metrics"), series, sizeof series);
  done_counts a = done_now(port, series);
  for (uint32_t i = 0; i < 100; i++) {
    CHECK_EQ(accel_fill_u32(ctx, dev, buf, i, &f[0]), 0);
    CHECK_EQ(accel_future_wait(f[0], -1), 0);
    accel_future_release(f[0]);
  }
  done_counts b = done_now(port, series);
  for (uint32_t i = 0; i < FLOOD; i++)
    CHECK_EQ(accel_fill_u32(ctx, dev, buf, i, &f[i]), 0);
  for (uint32_t i = 0; i < FLOOD; i++) {
    CHECK_EQ(accel_future_wait(f[i], -1), 0);
    accel_future_release(f[i]);
  }
  done_counts c = done_now(port, series);
  printf("# grouping %s: 100 waited fills: %.0f completions, %.0f events; %d in flight: %.0f "
         "completions, %.0f events\n",
         grouping ? "on" : "off", b.completions - a.completions, b.events - a.events, FLOOD,
         c.completions - b.completions, c.events - b.events);
  CHECK(b.completions - a.completions >= 100);
  CHECK_EQ(b.events - a.events, b.completions - a.completions);
  CHECK(c.completions - b.completions >= FLOOD); /* a completion each */
  if (grouping)
    CHECK(c.events - b.events < c.completions - b.completions);
  else
    CHECK_EQ(c.events - b.events, c.completions - b.completions);
  CHECK_EQ(accel_buffer_destroy(ctx, buf), 0);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
  return true;
}

TEST(a_worker_groups_the_completions_of_a_burst) {
  if (!completions_and_events(true))
    TEST_SKIP("no OpenCL device");
  CHECK(completions_and_events(false));
}

static const test_case tests[] = {
    TEST_CASE(nvml_readings_reach_status_json),
    TEST_CASE(nvml_readings_reach_text_and_metrics),
    TEST_CASE(no_nvml_says_why),
    TEST_CASE(nvml_init_failure_names_the_cause),
    TEST_CASE(interval_zero_turns_telemetry_off_and_its_limits),
    TEST_CASE(busy_time_is_measured_for_the_cpu_device),
    TEST_CASE(long_work_is_shown_in_progress),
    TEST_CASE(loop_and_worker_link_busy_times_are_in_metrics),
    TEST_CASE(a_worker_groups_the_completions_of_a_burst),
};

TEST_MAIN(tests)
