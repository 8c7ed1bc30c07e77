/* acceld with several shards ([daemon] shards, server/server_shards.h): connections spread
 * over them, each client's data its own; reports and limits cover every shard (a report asked
 * on a connection of shard 1 counts shard 0's sessions; max_connections counts every shard's
 * connections, at the limit and one past); a SIGTERM drains every shard's ops in flight; a
 * client killed on one shard costs the others nothing; 16 shards at most (its own meson
 * test, not under ThreadSanitizer: sixteen worlds start slowly there). The others run under
 * ThreadSanitizer too (suite 'threads'): reports read other shards' state while those are
 * parked. */
#include <signal.h>
#include <sys/wait.h>

#include "util.h"

enum { SHARDS = 2, CLIENTS = 6, N = 4096 };

static void start(td_daemon *d, const char *extra) {
  char conf[512];
  snprintf(conf, sizeof conf, "[daemon]\nshards = %d\nio_threads = 2\n%s", SHARDS,
           extra ? extra : "");
  td_prepare(d);
  td_write_config(d, conf);
  td_start(d, NULL);
}

static void wait_log(td_daemon *d, const char *text) {
  TEST_WAIT_FOR(strstr(td_log(d), text) != NULL, 20);
}

/* The ids of the sessions `accelctl clients --json` lists; how many (at most max). */
static int client_ids(td_daemon *d, long ids[], int max) {
  static char out[1 << 16];
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d->url, "clients", "--json", NULL), 0);
  int n = 0;
  for (const char *p = strstr(out, "\"id\":"); p && n < max; p = strstr(p + 1, "\"id\":"))
    ids[n++] = strtol(p + 5, NULL, 10);
  return n;
}

/* Six clients, each with its own data, on both shards (a local id's shard is its value mod
 * SHARDS); the status counts every shard's sessions and buffers, asked on whichever shard
 * accelctl's connection lands. */
TEST(clients_spread_over_the_shards_each_with_its_own_data) {
  td_daemon d;
  start(&d, NULL);
  td_client c[CLIENTS];
  static uint32_t src[CLIENTS][N], dst[N];
  for (int i = 0; i < CLIENTS; i++) {
    td_client_open(&c[i], d.url);
    CHECK_OK(td_hello(&c[i], NULL));
    for (uint32_t k = 0; k < N; k++)
      src[i][k] = (uint32_t)i * 7919u + k * 2654435761u;
    CHECK_OK(td_create(&c[i], td_handle(1, 1), ACCEL_U32, N)); /* the same handle in each */
    CHECK_OK(td_write_u32(&c[i], td_handle(1, 1), src[i], N));
  }
  for (int i = 0; i < CLIENTS; i++) {
    CHECK_OK(td_read_u32(&c[i], td_handle(1, 1), dst, N));
    CHECK_EQ(memcmp(dst, src[i], sizeof dst), 0);
  }
  long ids[CLIENTS + 2];
  int n = client_ids(&d, ids, CLIENTS + 2);
  CHECK_EQ(n, CLIENTS);
  int on[SHARDS] = {0};
  for (int i = 0; i < n; i++)
    on[(ids[i] & 0x7fffffff) % SHARDS]++;
  CHECK_EQ(on[0], CLIENTS / SHARDS);
  CHECK_EQ(on[1], CLIENTS / SHARDS);
  CHECK_EQ(td_status_field(&d, "sessions"), CLIENTS);
  CHECK_EQ(td_status_field(&d, "buffers"), CLIENTS);
  CHECK_GE(td_status_field(&d, "host_mem_used"), (long)CLIENTS * N * 4);
  CHECK_GE(td_status_field(&d, "ops_completed"), (long)CLIENTS * 3);
  for (int i = 0; i < CLIENTS; i++)
    td_client_close(&c[i]);
  TEST_WAIT_FOR(td_status_field(&d, "sessions") == 0, 20);
  CHECK_EQ(td_status_field(&d, "buffers"), 0);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* One client on shard 0; accelctl's connection then goes to shard 1, whose report is made on
 * shard 0 and sent back: it still sees the session of shard 0, and /metrics (shard 0's HTTP
 * endpoint) counts shard 1's ops; /healthz reads every shard's devices (none parked). */
TEST(a_report_asked_on_another_shard_covers_them_all) {
  td_daemon d;
  int port = td_free_port();
  char extra[128];
  snprintf(extra, sizeof extra, "[metrics]\nlisten = http://127.0.0.1:%d\n", port);
  start(&d, extra);
  wait_log(&d, ": closed"); /* the start's own ping is gone */
  td_client a, b;
  td_client_open(&a, d.url);
  CHECK_OK(td_hello(&a, NULL)); /* shard 0: the fewest, the first */
  td_client_open(&b, d.url);
  CHECK_OK(td_hello(&b, NULL)); /* shard 1 */
  CHECK_OK(td_create(&b, td_handle(1, 1), ACCEL_U32, 64));
  for (int i = 0; i < 10; i++)
    CHECK_OK(td_fill(&b, td_handle(1, 1), (uint32_t)i));
  td_client_close(&b); /* accelctl takes shard 1's place now */
  TEST_WAIT_FOR(td_status_field(&d, "sessions") == 1, 20);
  long ids[4];
  CHECK_EQ(client_ids(&d, ids, 4), 1);
  CHECK_EQ((ids[0] & 0x7fffffff) % SHARDS, 0);
  const char *m = td_http_get(port, "/metrics");
  const char *fills = strstr(m, "kind=\"fill\",status=\"OK\"} ");
  CHECK(fills != NULL);
  CHECK_GE(strtol(fills + strlen("kind=\"fill\",status=\"OK\"} "), NULL, 10), 10);
  CHECK(strstr(m, "accel_loop_busy_seconds_total{loop=\"1\"}") != NULL);
  CHECK(strcmp(td_http_get(port, "/healthz"), "ok\n") == 0); /* every shard's devices serve */
  td_client_close(&a);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* max_connections = 4 over two shards: four are served (two on each), the fifth hears EBUSY. */
TEST(max_connections_counts_every_shard_at_the_limit_and_one_past) {
  td_daemon d;
  start(&d, "max_connections = 4\n");
  wait_log(&d, ": closed");
  td_check_max_connections(&d, 4);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* The ops in flight each shard logged when the drain began, added up. */
static long flying_at_drain(td_daemon *d) {
  long flying = 0;
  int shards = 0;
  for (const char *p = strstr(td_log(d), "draining: "); p; p = strstr(p + 1, "draining: ")) {
    flying += strtol(p + strlen("draining: "), NULL, 10);
    shards++;
  }
  CHECK_EQ(shards, SHARDS);
  return flying;
}

/* SIGTERM with sgemms in flight on both shards: every op is answered, every one in flight when
 * the drain began finishes OK, and acceld exits 0 once both shards are idle. The work doubles
 * until some op is still running when the signal comes (fast machines). */
TEST(sigterm_drains_every_shard) {
  enum { OPS = 12 };
  long flying = 0;
  for (int64_t n = 256; flying == 0 && n <= 2048; n *= 2) {
    td_daemon d;
    start(&d, NULL);
    td_client c[SHARDS];
    for (int k = 0; k < SHARDS; k++) {
      td_client_open(&c[k], d.url);
      CHECK_OK(td_hello(&c[k], NULL));
      for (uint32_t i = 1; i <= 3; i++)
        CHECK_OK(td_create(&c[k], td_handle(i, 1), ACCEL_F32, (uint64_t)(n * n)));
    }
    for (int k = 0; k < SHARDS; k++)
      for (uint64_t i = 0; i < OPS; i++) {
        proto_out o;
        proto_out_init(&o);
        td_encode_sgemm(&o, 500 + i, td_handle(1, 1), td_handle(2, 1), td_handle(3, 1), n);
        td_send_raw(&c[k], o.data, o.len, 500 + i);
        proto_out_free(&o);
      }
    test_sleep_ms(20);
    td_signal(&d, SIGTERM);
    int ok = 0;
    for (int k = 0; k < SHARDS; k++)
      ok += td_answers_ok_or_closed(&c[k], OPS);
    CHECK_EQ(td_wait(&d), 0);
    CHECK(strstr(td_log(&d), "drained (OK)") != NULL);
    flying = flying_at_drain(&d);
    CHECK_GE(ok, flying);
    for (int k = 0; k < SHARDS; k++)
      td_client_close(&c[k]);
    td_cleanup(&d);
  }
  CHECK_GT(flying, 0);
}

/* A client killed with ops in flight on one shard: the other shard's client goes on, and its
 * session and the dead one's are counted right. */
TEST(a_client_killed_on_one_shard_costs_the_other_nothing) {
  td_daemon d;
  start(&d, NULL);
  td_client a;
  td_client_open(&a, d.url);
  CHECK_OK(td_hello(&a, NULL));
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    td_client b;
    td_client_open(&b, d.url);
    if (td_hello(&b, NULL) != 0 || td_create(&b, td_handle(1, 1), ACCEL_U32, 1 << 20) != 0)
      _exit(1);
    for (uint64_t i = 0; i < 1000; i++) {
      proto_out o;
      proto_out_init(&o);
      td_encode_fill(&o, 100 + i, td_handle(1, 1), (uint32_t)i);
      td_send_raw(&b, o.data, o.len, 100 + i);
      proto_out_free(&o);
    }
    pause();
    _exit(0);
  }
  TEST_WAIT_FOR(td_status_field(&d, "sessions") == 2, 20);
  CHECK_EQ(kill(pid, SIGKILL), 0);
  CHECK_EQ(waitpid(pid, NULL, 0), pid);
  uint32_t got[64];
  CHECK_OK(td_create(&a, td_handle(2, 1), ACCEL_U32, 64));
  for (uint32_t i = 0; i < 100; i++) {
    CHECK_OK(td_fill(&a, td_handle(2, 1), i));
    CHECK_OK(td_read_u32(&a, td_handle(2, 1), got, 64));
    CHECK_EQ(got[63], i);
  }
  TEST_WAIT_FOR(td_status_field(&d, "sessions") == 1, 20);
  td_client_close(&a);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* shards = 16 (the most) serves a client on each shard; 0 and 17 are refused at start with
 * the config's line. */
TEST(shards_at_the_limit_and_one_past) {
  enum { MOST = 16 };
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, "[daemon]\nshards = 0\n");
  CHECK_EQ(td_start_expect_exit(&d, NULL), 1);
  CHECK(strstr(td_log(&d), "acceld.conf:2") != NULL);
  td_write_config(&d, "[daemon]\nshards = 17\n");
  CHECK_EQ(td_start_expect_exit(&d, NULL), 1);
  td_write_config(&d, "[daemon]\nshards = 16\nio_threads = 0\n");
  td_start(&d, NULL);
  wait_log(&d, ": closed"); /* the start's own ping is gone */
  td_client c[MOST];
  uint32_t got[8];
  for (int i = 0; i < MOST; i++) {
    td_client_open(&c[i], d.url);
    CHECK_OK(td_hello(&c[i], NULL));
    CHECK_OK(td_create(&c[i], td_handle(1, 1), ACCEL_U32, 8));
    CHECK_OK(td_fill(&c[i], td_handle(1, 1), (uint32_t)i));
    CHECK_OK(td_read_u32(&c[i], td_handle(1, 1), got, 8));
    CHECK_EQ(got[7], (uint32_t)i);
  }
  long ids[MOST + 1];
  CHECK_EQ(client_ids(&d, ids, MOST + 1), MOST);
  bool on[MOST] = {false};
  for (int i = 0; i < MOST; i++)
    on[(ids[i] & 0x7fffffff) % MOST] = true;
  for (int k = 0; k < MOST; k++)
    CHECK(on[k]); /* one on each shard */
  for (int i = 0; i < MOST; i++)
    td_client_close(&c[i]);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(clients_spread_over_the_shards_each_with_its_own_data),
    TEST_CASE(a_report_asked_on_another_shard_covers_them_all),
    TEST_CASE(max_connections_counts_every_shard_at_the_limit_and_one_past),
    TEST_CASE(sigterm_drains_every_shard),
    TEST_CASE(a_client_killed_on_one_shard_costs_the_other_nothing),
    TEST_CASE(shards_at_the_limit_and_one_past),
};

TEST_MAIN(tests)
