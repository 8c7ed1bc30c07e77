/* acceld as a service: configuration, socket permissions, detaching, fault injection,
 * SIGTERM draining ops in flight, SIGHUP reloading. */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "util.h"

static char out[1 << 16];

/* Waits for `s` in the daemon's log (as long as it takes: a hang is the watchdog's). */
static void wait_log(td_daemon *d, const char *s) {
  TEST_WAIT_FOR(strstr(td_log(d), s) != NULL, 20);
}

/* Whether accelctl's device list shows a device serving after one restart, from `from` on
 * (a device's line, or NULL: any). */
static bool restarted_once(td_daemon *d, const char *from) {
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d->url, "devices", NULL), 0);
  const char *p = from ? strstr(out, from) : out;
  return p != NULL && strstr(p, "serving, restarts 1") != NULL;
}

TEST(bad_configurations_are_refused) {
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, "[limits]\nmax_inflight = 10\n"); /* misspelt */
  CHECK_EQ(td_start_expect_exit(&d, NULL), 1);
  CHECK(strstr(td_log(&d), "acceld.conf:2") != NULL);
  td_write_config(&d, "[daemon]\nsocket_group = no-such-group-here\n");
  CHECK_EQ(td_start_expect_exit(&d, NULL), 1);
  CHECK(strstr(td_log(&d), "no such group") != NULL);
  td_write_config(&d, "");
  CHECK_EQ(td_start_expect_exit(&d, "--listen", "bogus://nowhere", NULL), 1);
  CHECK(strstr(td_log(&d), "cannot listen on bogus://nowhere") != NULL);
  CHECK_EQ(td_start_expect_exit(&d, "--cpu-devices", "99", NULL), 2);
  td_write_config(&d, "[devices]\ncuda_context = primary\n"); /* taken (no GPU here) */
  td_start(&d, NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_write_config(&d, "[devices]\ncuda_context = shared\n"); /* own or primary only */
  CHECK_EQ(td_start_expect_exit(&d, NULL), 1);
  CHECK(strstr(td_log(&d), "acceld.conf:2") != NULL);
  td_cleanup(&d);
}

TEST(socket_mode_from_the_config) {
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, "[daemon]\nsocket_mode = 0600\nsocket_group = 0\n");
  td_start(&d, NULL);
  struct stat st;
  CHECK_EQ(stat(d.url + 6, &st), 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK_EQ(st.st_mode & 0777, 0600);
  CHECK_EQ(st.st_gid, 0);
  CHECK_EQ(td_stop(&d), 0);
  CHECK_NE(stat(d.url + 6, &st), 0); /* the socket file went with the listener */
  td_cleanup(&d);
}

/* Without --foreground acceld returns once it serves, detached; it is found through its
 * socket (the peer pid of the ipc connection) and stopped with SIGTERM. */
TEST(detaches_when_not_foreground) {
  td_daemon d;
  td_prepare(&d);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' --config '%s' --listen '%s' >/dev/null 2>>'%s'", getenv("ACCELD"),
           d.conf, d.url, d.log);
  CHECK_EQ(system(cmd), 0); /* returns only once the daemon serves */
  td_client c;
  td_client_open(&c, d.url);
  proto_out o;
  proto_control_req req = {PROTO_CTL_PING, 0};
  proto_out_init(&o);
  CHECK_OK(proto_encode_control(&o, 5, &req));
  td_send_raw(&c, o.data, o.len, 5);
  proto_out_free(&o);
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, TD_FOREVER), 0);
  struct ucred cr; /* the daemon's pid, from the local socket's peer credentials */
  socklen_t crlen = sizeof cr;
  int rv = getsockopt(c.fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen);
  uint64_t pid = (uint64_t)cr.pid;
  nng_msg_free(m);
  td_client_close(&c);
  CHECK_EQ(rv, 0);
  CHECK_GT(pid, 1);
  CHECK_NE((pid_t)pid, getpid());
  CHECK_EQ(kill((pid_t)pid, SIGTERM), 0);
  struct stat st;
  TEST_WAIT_FOR(stat(d.url + 6, &st) != 0, 20);
  wait_log(&d, "drained (OK)");
  td_cleanup(&d);
}

TEST(fault_injection_is_refused_without_the_flag) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "inject-fault", "--device", "0", NULL), 1);
  CHECK(strstr(out, "refused") != NULL);
  CHECK(strstr(out, "EPERM") != NULL);
  CHECK_EQ(td_status_field(&d, "restarts"), 0);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(fault_injection_restarts_the_device) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, "--enable-fault-injection", "--cpu-devices", "2", NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  uint64_t h = td_handle(1, 1);
  uint32_t v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8];
  CHECK_OK(td_create(&c, h, ACCEL_U32, 8));
  CHECK_OK(td_write_u32(&c, h, v, 8)); /* on the host: survives the device */
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "inject-fault", "--device", "1", NULL), 0);
  CHECK(strstr(out, "fault injected") != NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "inject-fault", "--device", "9", NULL), 1);
  CHECK(strstr(out, "no such device") != NULL);
  TEST_WAIT_FOR(restarted_once(&d, "device 1:"), 20);
  CHECK_OK(td_read_u32(&c, h, back, 8));
  CHECK_EQ(back[7], 8);
  CHECK_OK(td_control(&c, PROTO_CTL_PING, 0));
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* With exit_on_quarantine, a device past its restart limit makes the daemon drain and exit
 * with status 3, for the service manager to start a fresh one. */
TEST(quarantine_exits_for_a_restart) {
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, "[daemon]\nfault_injection = true\n"
                      "[devices]\nmax_restarts = 1\nexit_on_quarantine = true\n");
  td_start(&d, NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "inject-fault", "--device", "0", NULL), 0);
  TEST_WAIT_FOR(restarted_once(&d, NULL), 20);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "inject-fault", "--device", "0", NULL), 0);
  CHECK_EQ(td_wait(&d), 3);
  CHECK(strstr(td_log(&d), "quarantined") != NULL);
  td_cleanup(&d);
}

/* ---- SIGTERM with ops in flight ---- */

/* One attempt: OPS sgemm of n on one C (so they run one after the other), SIGTERM soon after
 * they are sent. Every op gets an answer: OK if it reached the daemon before the drain began,
 * ECLOSED if after. Returns how many ops the daemon said were in flight when it began. */
static long drain_attempt(int64_t n) {
  enum { OPS = 16 };
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  for (uint32_t i = 1; i <= 3; i++)
    CHECK_OK(td_create(&c, td_handle(i, 1), ACCEL_F32, (uint64_t)(n * n)));
  for (uint64_t i = 0; i < OPS; i++) {
    proto_out o;
    proto_out_init(&o);
    td_encode_sgemm(&o, 500 + i, td_handle(1, 1), td_handle(2, 1), td_handle(3, 1), n);
    td_send_raw(&c, o.data, o.len, 500 + i);
    proto_out_free(&o);
  }
  test_sleep_ms(20);
  td_signal(&d, SIGTERM);
  int ok = td_answers_ok_or_closed(&c, OPS);
  CHECK_EQ(td_wait(&d), 0); /* one SIGTERM: a second one would mean "stop now" */
  CHECK(strstr(td_log(&d), "drained (OK)") != NULL);
  const char *p = strstr(td_log(&d), "draining: ");
  CHECK(p != NULL);
  long flying = strtol(p + strlen("draining: "), NULL, 10);
  CHECK_GE(ok, flying); /* every op in flight when the drain began finished */
  td_client_close(&c);
  td_cleanup(&d);
  return flying;
}

/* SIGTERM with ops in flight: they finish and are answered, then acceld exits 0. The work
 * doubles until some op is still running when the signal comes (fast machines). */
TEST(sigterm_drains_ops_in_flight_and_exits_0) {
  long flying = 0;
  for (int64_t n = 256; flying == 0 && n <= 2048; n *= 2)
    flying = drain_attempt(n);
  CHECK_GT(flying, 0);
}

/* A reply larger than the socket takes, still being written when the drain finds nothing in
 * flight: the drain waits for its last byte before the links close, and a client that reads
 * only after the SIGTERM gets it whole. */
TEST(a_drain_waits_for_a_large_reply_to_be_written) {
  enum { N = 2 << 20 }; /* 8 MiB of u32 */
  td_daemon d;
  td_prepare(&d);
  td_start(&d, "--backends", "cpu", NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  uint64_t h = td_handle(1, 1);
  CHECK_OK(td_create(&c, h, ACCEL_U32, N));
  CHECK_OK(td_fill(&c, h, 0x5a5a5a5au));
  dev_op op = {.h = {.kind = DEV_OP_READ, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = h, .count = N};
  op.u.read.bytes = (uint64_t)N * 4;
  proto_out o;
  uint64_t id = c.next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, id, &op, (proto_bytes){NULL, 0}));
  td_send_raw(&c, o.data, o.len, id);
  proto_out_free(&o);
  test_sleep_ms(200); /* the reply made and handed to the socket, which holds a little of it */
  td_signal(&d, SIGTERM);
  test_sleep_ms(500); /* a drain that did not wait would have closed the link by now */
  nng_msg *m;
  CHECK_OK(td_recv(&c, &m, TD_FOREVER));
  proto_bytes data;
  CHECK_OK(td_reply_status(m, id, &data));
  CHECK_EQ(data.len, (size_t)N * 4);
  const uint32_t *v = (const uint32_t *)data.data;
  for (size_t i = 0; i < N; i += 4099)
    CHECK_EQ(v[i], 0x5a5a5a5au);
  CHECK_EQ(v[N - 1], 0x5a5a5a5au);
  nng_msg_free(m);
  td_client_close(&c);
  CHECK_EQ(td_wait(&d), 0);
  CHECK(strstr(td_log(&d), "drained (OK)") != NULL);
  td_cleanup(&d);
}

TEST(sighup_reloads_live_settings) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_write_config(&d, "[daemon]\nlog_level = debug\n[devices]\ncpu_devices = 3\n"
                      "[limits]\nmax_in_flight = 100\nmax_memory = 1M\n");
  td_signal(&d, SIGHUP);
  wait_log(&d, "configuration reloaded");
  CHECK(strstr(td_log(&d), "reload: max_in_flight 8192 -> 100") != NULL);
  CHECK(strstr(td_log(&d), "reload: max_memory 0 -> 1048576") != NULL);
  CHECK(strstr(td_log(&d), "cpu_devices changed: takes effect on restart") != NULL);
  td_client c;
  td_client_open(&c, d.url);
  proto_welcome w;
  CHECK_OK(td_hello(&c, &w));
  CHECK_EQ(w.limits.max_in_flight, 100);
  CHECK_EQ(w.limits.max_memory, 1 << 20);
  td_client_close(&c);
  td_write_config(&d, "[limits]\nmax_in_flight = lots\n");
  td_signal(&d, SIGHUP);
  wait_log(&d, "reload failed, nothing changed");
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "ping", NULL), 0);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A reload that raises max_message lets bigger frames in over nng too: the socket's own
 * receive limit follows the codec's (left as it was, nng would drop such a frame unread and
 * its client would wait for a reply that never comes). */
TEST(sighup_raises_the_frame_limit_on_nng_too) {
  enum { COUNT = 1 << 16 }; /* a write of 256 KiB: past the old limit, within the new */
  static uint32_t data[COUNT];
  td_daemon d;
  char tcp[64], raised[1024];
  td_start_nng(&d, "[limits]\nmax_message = 65536\n", tcp, sizeof tcp);
  snprintf(raised, sizeof raised,
           "[limits]\nmax_message = 1048576\n[security]\ntls_cert = %s\n"
           "tls_key = %s\n",
           td_tls_pem("server.pem"), td_tls_pem("server.key"));
  td_write_config(&d, raised);
  td_signal(&d, SIGHUP);
  wait_log(&d, "configuration reloaded");
  td_client c;
  td_client_open(&c, tcp);
  proto_welcome w;
  CHECK_OK(td_hello(&c, &w));
  CHECK_EQ(w.limits.max_message, 1 << 20);
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, COUNT));
  CHECK_OK(td_write_u32(&c, td_handle(1, 1), data, COUNT));
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static bool starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The start of the line that holds `s` in the daemon's log (NULL if none). */
static const char *line_with(td_daemon *d, const char *s) {
  const char *log = td_log(d), *p = strstr(log, s);
  while (p != NULL && p > log && p[-1] != '\n')
    p--;
  return p;
}

/* Starts acceld at log level info, then reloads it to debug and then with a bad file: an
 * info line and an error line. */
static void reload_to_debug_then_fail(td_daemon *d) {
  td_write_config(d, "[daemon]\nlog_level = info\n");
  td_start(d, NULL);
  td_write_config(d, "[daemon]\nlog_level = debug\n");
  td_signal(d, SIGHUP);
  wait_log(d, "configuration reloaded");
  td_write_config(d, "[limits]\nmax_in_flight = lots\n");
  td_signal(d, SIGHUP);
  wait_log(d, "reload failed, nothing changed");
}

/* Under systemd ($JOURNAL_STREAM names stderr): the syslog priority, no time of day. */
TEST(journal_lines_carry_the_syslog_priority) {
  td_daemon d;
  td_prepare(&d);
  FILE *f = fopen(d.log, "w"); /* td_start appends to it: the same inode */
  CHECK(f != NULL);
  fclose(f);
  struct stat st;
  CHECK_EQ(stat(d.log, &st), 0);
  char stream[64];
  snprintf(stream, sizeof stream, "%llu:%llu", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino);
  CHECK_EQ(setenv("JOURNAL_STREAM", stream, 1), 0);
  reload_to_debug_then_fail(&d);
  unsetenv("JOURNAL_STREAM");
  const char *info = line_with(&d, "reload: log_level info -> debug");
  CHECK(info != NULL);
  CHECK(starts_with(info, "<6>service: reload: log_level info -> debug"));
  const char *err = line_with(&d, "reload failed, nothing changed");
  CHECK(err != NULL);
  CHECK(starts_with(err, "<3>service: reload failed"));
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* Elsewhere: "YYYY-MM-DDTHH:MM:SS.mmmZ LEVEL component: ..." (UTC). */
TEST(log_lines_carry_the_date_and_level_name) {
  unsetenv("JOURNAL_STREAM");
  td_daemon d;
  td_prepare(&d);
  reload_to_debug_then_fail(&d);
  const char *line = line_with(&d, "reload: log_level info -> debug");
  CHECK(line != NULL);
  static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ ";
  for (size_t i = 0; i < sizeof shape - 1; i++)
    CHECK(shape[i] == 'd' ? line[i] >= '0' && line[i] <= '9' : line[i] == shape[i]);
  CHECK(starts_with(line + 25, "info  service: reload: log_level info -> debug"));
  line = line_with(&d, "reload failed, nothing changed");
  CHECK(line != NULL);
  CHECK(starts_with(line + 25, "error service: reload failed"));
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* CPU time (user + system, in clock ticks) a process has used, from /proc/PID/stat. */
static long cpu_ticks(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the name may hold spaces: fields start after it */
  CHECK(p != NULL);
  unsigned long utime = 0, stime = 0;
  CHECK_EQ(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime), 2);
  return (long)(utime + stime);
}

/* An idle acceld (devices open, a client connected and quiet) sleeps: over two seconds it uses
 * at most a few ticks (a spinning loop or a polling timer would use all 200). */
TEST(an_idle_daemon_uses_no_cpu) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  test_sleep_ms(500); /* start-up done */
  long t0 = cpu_ticks(d.pid);
  test_sleep_ms(2000);
  long used = cpu_ticks(d.pid) - t0;
  printf("# idle acceld: %ld clock ticks of CPU in 2 s\n", used);
  CHECK_LE(used, 10);
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(bad_configurations_are_refused),
    TEST_CASE(socket_mode_from_the_config),
    TEST_CASE(detaches_when_not_foreground),
    TEST_CASE(fault_injection_is_refused_without_the_flag),
    TEST_CASE(fault_injection_restarts_the_device),
    TEST_CASE(quarantine_exits_for_a_restart),
    TEST_CASE(sigterm_drains_ops_in_flight_and_exits_0),
    TEST_CASE(a_drain_waits_for_a_large_reply_to_be_written),
    TEST_CASE(sighup_reloads_live_settings),
    TEST_CASE(sighup_raises_the_frame_limit_on_nng_too),
    TEST_CASE(journal_lines_carry_the_syslog_priority),
    TEST_CASE(log_lines_carry_the_date_and_level_name),
    TEST_CASE(an_idle_daemon_uses_no_cpu),
};

TEST_MAIN(tests)
