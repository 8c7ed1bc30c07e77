/* accelctl against the real acceld: ping, status, devices, tree, clients and top (text and
 * JSON), errors (each named: the option, the command, the address and its cause); acceld's
 * start-up errors; clients named after their program or their URL's name=. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "../tcp_listener.h"
#include "accel/accel.h"
#include "util.h"

static char out[1 << 16];

TEST(ping_answers) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "ping", NULL), 0);
  CHECK(strstr(out, "alive") != NULL);
  /* --url=URL as well as --url URL, and options after the command */
  char url_opt[160];
  snprintf(url_opt, sizeof url_opt, "--url=%s", d.url);
  CHECK_EQ(td_ctl(out, sizeof out, url_opt, "ping", NULL), 0);
  CHECK(strstr(out, "alive") != NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "ping", url_opt, "--json", NULL), 0);
  CHECK(strstr(out, "\"alive\":true") != NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(status_text_names_devices_and_clients) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, "--cpu-devices", "2", NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", NULL), 0);
  CHECK(strstr(out, "serving") != NULL);
  CHECK(strstr(out, "sessions") != NULL);
  CHECK(strstr(out, "device 0:") != NULL);
  CHECK(strstr(out, "device 1:") != NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* The JSON parses (python3's json module) and has every field the issue asks for. */
TEST(status_json_parses_with_required_fields) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  char path[160], cmd[768];
  snprintf(path, sizeof path, "%s/status.json", d.dir);
  snprintf(cmd, sizeof cmd, "'%s' --url '%s' status --json > '%s'", getenv("ACCELCTL"), d.url,
           path);
  CHECK_EQ(system(cmd), 0);
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import json,sys; s=json.load(open(sys.argv[1]));"
           "assert all(k in s for k in (\"devices\",\"sessions\",\"buffers\",\"ops_completed\"));"
           "d=s[\"devices\"]; assert len(d)>=1;"
           "assert all(k in d[0] for k in (\"index\",\"name\",\"backend\",\"state\","
           "\"restarts\",\"mem_used\",\"tasks_queued\")); assert d[0][\"state\"]==\"serving\";"
           "assert all(x[\"tasks_queued\"]==0 for x in d), d;"
           /* a pin cache for each backend here that keeps one (CUDA), none for others */
           "p=s[\"pin_caches\"]; has=any(x[\"backend\"]==\"cuda\" for x in d);"
           "assert [x[\"backend\"] for x in p]==([\"cuda\"] if has else []), p;"
           "assert all(x[\"pinned_bytes\"]==0 and x[\"hits\"]==0 for x in p), p' '%s'",
           path);
  CHECK_EQ(system(cmd), 0);
  CHECK_EQ(td_status_field(&d, "sessions"), 0);
  CHECK_EQ(td_status_field(&d, "buffers"), 0);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(devices_lists_devices_and_missing_backends) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "devices", NULL), 0);
  CHECK(strstr(out, "device 0:") != NULL);
  CHECK(strstr(out, "(cpu) serving") != NULL);
  /* The device's second line: its op packages with their dtypes (the CPU has every one). */
  CHECK(strstr(out, "\n  packages: blas (gemm f32 f64 f16 bf16; axpy/dot/scal f32 f64) rng (") !=
        NULL);
  CHECK(strstr(out, ") nn (f32 f64 f16 bf16) collective (f32 f64 f16 bf16)\n") != NULL);
  /* Every backend of the registry appears: with devices, or with why it has none. */
  CHECK(strstr(out, "opencl: ") != NULL || strstr(out, "(opencl)") != NULL);
  CHECK(strstr(out, "cuda: ") != NULL || strstr(out, "(cuda)") != NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* Only the devices and backends of the status JSON, as one document that parses. */
TEST(devices_json_has_devices_with_packages_and_backends) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  char path[160], cmd[1024];
  snprintf(path, sizeof path, "%s/devices.json", d.dir);
  snprintf(cmd, sizeof cmd, "'%s' --url '%s' devices --json > '%s'", getenv("ACCELCTL"), d.url,
           path);
  CHECK_EQ(system(cmd), 0);
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import json,sys; s=json.load(open(sys.argv[1]));"
           "assert sorted(s)==[\"backends\",\"devices\",\"telemetry\"], sorted(s);"
           "assert \"gpus\" in s[\"telemetry\"] and \"busy_s\" in s[\"devices\"][0], s;"
           "d=s[\"devices\"][0]; assert d[\"backend\"]==\"cpu\" and d[\"index\"]==0, d;"
           "p=d[\"packages\"]; assert sorted(p)==[\"blas\",\"collective\",\"nn\",\"rng\"], p;"
           "assert \"f64\" in p[\"blas\"][\"gemm\"] and \"f64\" in p[\"blas\"][\"vector\"], p;"
           "b={e[\"name\"]: e for e in s[\"backends\"]};"
           "assert sum(e[\"devices\"] for e in b.values())==len(s[\"devices\"]), b;"
           "assert b[\"cpu\"][\"devices\"]==sum(v[\"backend\"]==\"cpu\" for v in s[\"devices\"]);"
           "assert all(\"why\" in e for e in b.values() if e[\"devices\"]==0), b' '%s'",
           path);
  CHECK_EQ(system(cmd), 0);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(tree_shows_the_supervision_tree) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "tree", NULL), 0);
  CHECK(strstr(out, "root [running]") != NULL);
  CHECK(strstr(out, "  devices [running]") != NULL);
  CHECK(strstr(out, "    device0 [running]") != NULL);
  CHECK(strstr(out, "      blas [running]") != NULL);
  CHECK(strstr(out, "  server [running]") != NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(no_daemon_is_a_clear_error) {
  td_daemon d;
  td_prepare(&d); /* never started: nothing listens on d.url */
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", NULL), 1);
  char want[256];
  snprintf(want, sizeof want, "accelctl: no acceld at %s (connect: %s)\n", d.url, strerror(ENOENT));
  CHECK_STR_EQ(out, want);
  /* a socket file with nobody behind it (a daemon that died) */
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  const char *path = d.url + strlen("ipc://");
  CHECK_LT(strlen(path), sizeof sa.sun_path);
  memcpy(sa.sun_path, path, strlen(path) + 1);
  CHECK_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", NULL), 1);
  snprintf(want, sizeof want, "accelctl: no acceld at %s (connect: %s)\n", d.url,
           strerror(ECONNREFUSED));
  CHECK_STR_EQ(out, want);
  /* over nng: a port nobody listens on */
  char tcp[64];
  snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d", td_free_port());
  CHECK_EQ(td_ctl(out, sizeof out, "--url", tcp, "ping", NULL), 1);
  snprintf(want, sizeof want, "accelctl: no acceld at %s (connect: Connection refused)\n", tcp);
  CHECK_STR_EQ(out, want);
  close(fd);
  unlink(sa.sun_path);
  td_cleanup(&d);
}

/* --timeout bounds a tcp:// connect too: toward a listener whose queue is full (SYNs dropped,
 * as toward a host that vanished) accelctl gives up after its timeout, not the 10 s a library
 * connect waits. */
TEST(the_timeout_bounds_a_tcp_connect) {
  int port, ls = tcp_listener(0, &port), held[4];
  tcp_fill_queue(port, held, 4);
  char url[64], want[160];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  uint64_t t0 = test_now_ns();
  CHECK_EQ(td_ctl(out, sizeof out, "--url", url, "--timeout", "300", "ping", NULL), 1);
  uint64_t ms = (test_now_ns() - t0) / 1000000u;
  snprintf(want, sizeof want, "accelctl: no acceld at %s (connect: %s)\n", url,
           strerror(ETIMEDOUT));
  CHECK_STR_EQ(out, want);
  CHECK_GE(ms, 280u);
  CHECK_LT(ms, 5000u); /* the library's own connect timeout is 10 s */
  for (int i = 0; i < 4; i++)
    close(held[i]);
  close(ls);
}

/* `--version` prints "NAME VERSION" and exits 0; accelctl's version is the one the daemon of
 * the same build reports in its status. */
TEST(version_flags_print_the_build_version) {
  td_daemon d;
  td_prepare(&d);
  CHECK_EQ(td_start_expect_exit(&d, "--version", NULL), 0);
  const char *log = td_log(&d);
  CHECK(strncmp(log, "acceld ", 7) == 0);
  char daemon_version[64];
  CHECK_EQ(sscanf(log, "acceld %63s", daemon_version), 1);
  CHECK_EQ(td_ctl(out, sizeof out, "--version", NULL), 0);
  char ctl_version[64];
  CHECK_EQ(sscanf(out, "accelctl %63s", ctl_version), 1);
  CHECK_STR_EQ(ctl_version, daemon_version);
  CHECK_STR_EQ(ctl_version, ACCEL_VERSION_STRING);
  td_start(&d, NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", "--json", NULL), 0);
  char want[96];
  snprintf(want, sizeof want, "\"version\":\"%s\"", ctl_version);
  CHECK(strstr(out, want) != NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* accelctl ARGS... exits 2 with `message` as its first line, then one line of usage (not the
 * whole list of commands). */
#define CHECK_USAGE_ERROR(message, ...)                                                            \
  do {                                                                                             \
    CHECK_EQ(td_ctl(out, sizeof out, __VA_ARGS__, NULL), 2);                                       \
    static const char want_[] = "accelctl: " message "\nusage: accelctl ";                         \
    if (strncmp(out, want_, sizeof want_ - 1) != 0)                                                \
      TEST_FAIL("accelctl %s said:\n%s\nnot:\n%s", #__VA_ARGS__, out, want_);                      \
    CHECK(strstr(out, "commands:") == NULL);                                                       \
  } while (0)

TEST(usage_errors_exit_2) {
  CHECK_USAGE_ERROR("unknown command 'frobnicate'", "frobnicate");
  CHECK_USAGE_ERROR("unknown command 'bogus'", "--json", "bogus");
  CHECK_USAGE_ERROR("inject-fault needs --device N", "inject-fault");
  CHECK_USAGE_ERROR("--interval and --count are options of top, not of status", "status", "--count",
                    "2");
  CHECK_USAGE_ERROR("--interval: '10' is not a whole number from 50 to 3600000", "top",
                    "--interval", "10");
  CHECK_USAGE_ERROR("--timeout: 'x' is not a whole number from 1 to 3600000", "--timeout=x",
                    "ping");
  CHECK_USAGE_ERROR("unknown option '--bogus'", "--bogus", "ping");
  CHECK_USAGE_ERROR("unknown option '--bogus=1'", "ping", "--bogus=1");
  CHECK_USAGE_ERROR("unknown option '-x'", "-x", "ping");
  CHECK_USAGE_ERROR("option '--json' takes no value", "--json=yes", "ping");
  CHECK_USAGE_ERROR("option '--url' needs a value", "ping", "--url");
  CHECK_USAGE_ERROR("unexpected argument 'now' after ping", "ping", "now");
  CHECK_USAGE_ERROR("no command given", "--json");
  /* --help: the whole usage, on stdout, exit 0 */
  CHECK_EQ(td_ctl(out, sizeof out, "--help", NULL), 0);
  CHECK(strstr(out, "commands:") != NULL && strstr(out, "inject-fault --device N") != NULL);
}

/* A TCP port on 127.0.0.1 that this process listens on (so nobody else can take it). */
static int taken_port(int *fd) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_GE(*fd, 0);
  CHECK_EQ(bind(*fd, (struct sockaddr *)&sa, sizeof sa), 0);
  CHECK_EQ(listen(*fd, 1), 0);
  CHECK_EQ(getsockname(*fd, (struct sockaddr *)&sa, &len), 0);
  return ntohs(sa.sin_port);
}

/* acceld's last line when it cannot start names the address and the cause, not just a code
 * ("busy: queue or mailbox full", "system call failed"). */
TEST(start_up_errors_name_the_address_and_the_cause) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_daemon second = d; /* the same socket */
  second.pid = 0;
  snprintf(second.log, sizeof second.log, "%s/second.log", d.dir);
  CHECK_EQ(td_start_expect_exit(&second, NULL), 1);
  char want[256];
  snprintf(want, sizeof want,
           "acceld: cannot start: %s: address in use by another acceld (pid %d)\n", d.url,
           (int)d.pid);
  if (strstr(td_log(&second), want) == NULL)
    TEST_FAIL("no '%s' in:\n%s", want, td_log(&second));
  /* the metrics port taken (by this process) */
  int fd, port = taken_port(&fd);
  char port_arg[16];
  snprintf(port_arg, sizeof port_arg, "%d", port);
  snprintf(second.url, sizeof second.url, "ipc://%s/other.sock", d.dir);
  snprintf(second.log, sizeof second.log, "%s/third.log", d.dir);
  CHECK_EQ(td_start_expect_exit(&second, "--metrics", port_arg, NULL), 1);
  snprintf(want, sizeof want,
           "acceld: cannot start: metrics http://127.0.0.1:%d: address already in use\n", port);
  if (strstr(td_log(&second), want) == NULL)
    TEST_FAIL("no '%s' in:\n%s", want, td_log(&second));
  close(fd);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* The man page's SYNOPSIS (docs/man/acceld.8.scd) as one string, or NULL without the source. */
static char *man_synopsis(const char *page) {
  static char text[1 << 16];
  char path[512];
  const char *src = getenv("ACCEL_SOURCE_ROOT");
  if (src == NULL)
    return NULL;
  snprintf(path, sizeof path, "%s/docs/man/%s", src, page);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  char *from = strstr(text, "# SYNOPSIS"), *to = from ? strstr(from, "# DESCRIPTION") : NULL;
  CHECK(to != NULL);
  *to = '\0';
  return from;
}

/* Every flag `acceld --help` describes is in its synopsis line and in the man page's. */
TEST(acceld_synopsis_names_every_flag) {
  td_daemon d;
  td_prepare(&d);
  CHECK_EQ(td_start_expect_exit(&d, "--help", NULL), 0);
  static char help[1 << 14];
  snprintf(help, sizeof help, "%s", td_log(&d));
  char *flags = strstr(help, "\n  --");
  CHECK(flags != NULL);
  *flags++ = '\0'; /* help: the synopsis; flags: one line per flag */
  const char *man = man_synopsis("acceld.8.scd");
  int checked = 0;
  for (char *line = flags, *next; line != NULL; line = next) {
    if ((next = strchr(line, '\n')) != NULL)
      *next++ = '\0';
    char name[48], want[64];
    if (sscanf(line, "  --%47[a-z-]", name) != 1 || strcmp(name, "version") == 0)
      continue; /* a description's second line, or the synopsis' own */
    snprintf(want, sizeof want, "[--%s", name);
    if (strstr(help, want) == NULL)
      TEST_FAIL("--%s is not in acceld's synopsis:\n%s", name, help);
    snprintf(want, sizeof want, "[*--%s*", name);
    if (man != NULL && strstr(man, want) == NULL)
      TEST_FAIL("--%s is not in acceld.8's SYNOPSIS:\n%s", name, man);
    checked++;
  }
  CHECK_GE(checked, 10);
  td_cleanup(&d);
}

/* Runs a python3 one-liner on the JSON `accelctl COMMAND --json` prints (saved in the daemon's
 * directory; `s` in the script): its exit status. */
static int on_ctl_json(td_daemon *d, const char *command, const char *script) {
  char path[160], cmd[2048];
  snprintf(path, sizeof path, "%s/out.json", d->dir);
  snprintf(cmd, sizeof cmd, "'%s' --url '%s' %s --json > '%s'", getenv("ACCELCTL"), d->url, command,
           path);
  CHECK_EQ(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); %s' '%s'",
           script, path);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static int on_status_json(td_daemon *d, const char *script) {
  return on_ctl_json(d, "status", script);
}

/* Every command takes --json: ping and inject-fault say what they did as an object. */
TEST(every_command_takes_json) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, "--enable-fault-injection", NULL);
  CHECK_EQ(on_ctl_json(&d, "ping", "assert s[\"alive\"] is True and s[\"round_trip_us\"]>0"), 0);
  CHECK_EQ(on_ctl_json(&d, "inject-fault --device 0",
                       "assert s=={\"device\":0,\"fault_injected\":True}, s"),
           0);
  CHECK_EQ(on_ctl_json(&d, "clients", "assert s==[], s"), 0);
  CHECK_EQ(on_ctl_json(&d, "top --count 1",
                       "assert s[\"status\"][\"state\"]==\"serving\"; "
                       "assert s[\"clients\"]==[]"),
           0);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A device past its restart limit stays in `tree` (its actors are gone) with its restarts,
 * as text and as JSON; sizes in the text are for people ("23.5 GiB"). */
TEST(tree_shows_quarantined_devices_and_restarts) {
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, "[devices]\nbackends=cpu\ncpu_devices=2\nmax_restarts=1\n");
  td_start(&d, "--enable-fault-injection", NULL);
  bool quarantined = false;
  for (int i = 0; i < 200 && !quarantined; i++) {
    td_ctl(out, sizeof out, "--url", d.url, "inject-fault", "--device", "1", NULL);
    test_sleep_ms(20);
    CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "tree", NULL), 0);
    quarantined = strstr(out, "device 1: ") && strstr(strstr(out, "device 1: "), "quarantined");
  }
  CHECK(quarantined);
  CHECK(strstr(out, "devices:\n  device 0: ") != NULL);
  CHECK(strstr(out, "serving, restarts 0") != NULL);
  CHECK(strstr(out, "quarantined, restarts 1") != NULL);
  CHECK_EQ(on_ctl_json(&d, "tree",
                       "v=s[\"devices\"]; assert [x[\"state\"] for x in v]=="
                       "[\"serving\",\"quarantined\"], v; assert v[1][\"restarts\"]==1; "
                       "a=s[\"actors\"]; assert a[0][\"name\"]==\"root\" and a[0][\"depth\"]==0; "
                       "assert \"device0\" in [x[\"name\"] for x in a]; "
                       "assert \"device1\" not in [x[\"name\"] for x in a]"),
           0);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "devices", NULL), 0);
  const char *m = strstr(out, "memory ");
  CHECK(m != NULL);
  double used, total;
  char u1[8], u2[8];
  CHECK_EQ(sscanf(m, "memory %lf %7[A-Za-z] used of %lf %7[A-Za-z]", &used, u1, &total, u2), 4);
  CHECK(strstr("B KiB MiB GiB TiB", u2) != NULL && total > 0 && total < 1024);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* `clients` lists each session: its pid, uid, name (from HELLO), buffers and memory. */
TEST(clients_lists_each_session) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 1 << 18)); /* 1 MiB */
  CHECK_OK(td_fill(&c, td_handle(1, 1), 7));
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "clients", NULL), 0);
  CHECK(strstr(out, "daemon-test") != NULL);
  CHECK(strstr(out, "1.00 MiB") != NULL);
  char script[512];
  snprintf(script, sizeof script,
           "assert len(s)==1, s; x=s[0]; "
           "assert x[\"name\"]==\"daemon-test\" and x[\"pid\"]==%d and x[\"uid\"]==%d, x; "
           "assert x[\"buffers\"]==1 and x[\"memory\"]==1<<20 and x[\"ops_in_flight\"]==0, x; "
           "assert x[\"transport\"]==\"local\" and x[\"connected_ms\"]>=0",
           (int)getpid(), (int)getuid());
  CHECK_EQ(on_ctl_json(&d, "clients", script), 0);
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A libaccel client's frames go through shared rings where an I/O thread serves it (its
 * `rings` in `clients`), unless ACCEL_LOCAL_RINGS=0; without I/O threads, the socket. */
TEST(clients_use_shared_rings_where_io_threads_serve_them) {
  for (int threads = 0; threads <= 2; threads += 2) {
    td_daemon d;
    td_prepare(&d);
    char config[64];
    snprintf(config, sizeof config, "[daemon]\nio_threads = %d\n", threads);
    td_write_config(&d, config);
    td_start(&d, NULL);
    accel_ctx *offered, *plain;
    CHECK_OK(accel_open(&offered, d.url));
    CHECK_EQ(setenv("ACCEL_LOCAL_RINGS", "0", 1), 0);
    CHECK_OK(accel_open(&plain, d.url));
    CHECK_EQ(unsetenv("ACCEL_LOCAL_RINGS"), 0);
    accel_buffer b;
    CHECK_OK(accel_buffer_create(offered, ACCEL_U32, 4, &b)); /* an op through each way */
    CHECK_OK(accel_buffer_destroy(offered, b));
    CHECK_OK(accel_buffer_create(plain, ACCEL_U32, 4, &b));
    CHECK_OK(accel_buffer_destroy(plain, b));
    CHECK_EQ(on_ctl_json(&d, "clients",
                         threads ? "assert sorted(x[\"rings\"] for x in s)==[False, True], s"
                                 : "assert [x[\"rings\"] for x in s]==[False, False], s"),
             0);
    accel_close(offered);
    accel_close(plain);
    CHECK_EQ(td_stop(&d), 0);
    td_cleanup(&d);
  }
}

/* A libaccel client is named after its program (here this test's executable), or by its
 * URL's name=; another parameter is refused. */
TEST(clients_are_named_by_program_or_url) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  char url[192];
  accel_ctx *plain, *named;
  CHECK_OK(accel_open(&plain, d.url));
  snprintf(url, sizeof url, "%s?name=trainer-7", d.url);
  CHECK_OK(accel_open(&named, url));
  CHECK_EQ(on_ctl_json(&d, "clients",
                       "n=sorted(x[\"name\"] for x in s); "
                       "assert n==[\"test-daemon-cli\",\"trainer-7\"], n"),
           0);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "clients", NULL), 0);
  CHECK(strstr(out, "trainer-7") != NULL && strstr(out, "test-daemon-cli") != NULL);
  accel_close(plain);
  accel_close(named);
  /* (its detail is checked in tests/api/errors.c: this executable has a copy of the runtime
   * of its own besides libaccel's, so it cannot read libaccel's detail) */
  snprintf(url, sizeof url, "%s?nmae=x", d.url);
  CHECK_ERR(accel_open(&plain, url), ACCEL_EINVAL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* `top` in a real terminal (tmux): the screen is redrawn in place, so one header is on it,
 * and what it shows changes between refreshes. The screen is read until it is drawn (no fixed
 * delay: a loaded machine may take seconds to start acceld and accelctl). */
static void capture(const char *session, char *screen, size_t len) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "tmux -L '%s' capture-pane -p -t top", session);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL);
  size_t n = fread(screen, 1, len - 1, p);
  screen[n] = '\0';
  CHECK_EQ(pclose(p), 0);
}

static int drawn(const char *screen) {
  return strstr(screen, "accelctl top: ") != NULL && strstr(screen, "acceld ") != NULL &&
         strstr(screen, "NAME") != NULL;
}

TEST(top_refreshes_in_place_in_a_terminal) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, NULL);
  char cmd[1024], session[64];
  snprintf(session, sizeof session, "accel-top-%d", (int)getpid());
  snprintf(cmd, sizeof cmd,
           "tmux -L '%s' new-session -d -s top -x 132 -y 50 \"'%s' --url '%s' top --interval 200\"",
           session, getenv("ACCELCTL"), d.url);
  CHECK_EQ(system(cmd), 0);
  static char screen[2][8192];
  TEST_WAIT_FOR((capture(session, screen[0], sizeof screen[0]), drawn(screen[0])), 100);
  TEST_WAIT_FOR((capture(session, screen[1], sizeof screen[1]),
                 drawn(screen[1]) && strcmp(screen[0], screen[1]) != 0), /* the uptime moved */
                100);
  snprintf(cmd, sizeof cmd, "tmux -L '%s' kill-server", session);
  CHECK_EQ(system(cmd), 0);
  for (int k = 0; k < 2; k++) {
    const char *first = strstr(screen[k], "accelctl top: ");
    CHECK(strstr(first + 1, "accelctl top: ") == NULL); /* redrawn, not scrolled */
  }
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* An op on ANY goes to the most potent device: with an OpenCL CPU device (PoCL) numbered
 * first, a fill still lands on the CPU backend's device (its memory grows; PoCL's does not),
 * while a fill that names the OpenCL device runs there. */
TEST(any_prefers_the_cpu_backend_over_an_opencl_cpu_device) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, "--backends", "opencl,cpu", NULL);
  /* 3: no OpenCL CPU device here (no OpenCL build or no PoCL); else device 0 is one. */
  int rc = on_status_json(&d, "v=s[\"devices\"]; "
                              "sys.exit(0 if v and v[0][\"backend\"]==\"opencl\" and "
                              "v[0][\"kind\"]==\"cpu\" and v[-1][\"backend\"]==\"cpu\" else 3)");
  if (rc == 3) {
    td_stop(&d);
    td_cleanup(&d);
    TEST_SKIP("no OpenCL CPU device here");
  }
  CHECK_EQ(rc, 0);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 1 << 20));
  dev_op op = {.h = {.kind = DEV_OP_FILL, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0] = (dev_op_buf){.handle = td_handle(1, 1)};
  op.u.fill.value = 7;
  proto_out o;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 50, &op, (proto_bytes){NULL, 0}));
  CHECK_OK(td_call(&c, &o, 50));
  CHECK_EQ(on_status_json(&d, "v=s[\"devices\"]; "
                              "assert v[0][\"mem_used\"]==0, v[0]; "
                              "assert v[-1][\"mem_used\"]>=4<<20, v[-1]"),
           0);
  CHECK_OK(td_create(&c, td_handle(2, 1), ACCEL_U32, 1 << 20));
  op.h.device = 0; /* named: the OpenCL device */
  op.bufs[0].handle = td_handle(2, 1);
  proto_out_free(&o);
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, 51, &op, (proto_bytes){NULL, 0}));
  CHECK_OK(td_call(&c, &o, 51));
  CHECK_EQ(on_status_json(&d, "v=s[\"devices\"]; assert v[0][\"mem_used\"]>=4<<20, v[0]"), 0);
  proto_out_free(&o);
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(ping_answers),
    TEST_CASE(status_text_names_devices_and_clients),
    TEST_CASE(status_json_parses_with_required_fields),
    TEST_CASE(devices_lists_devices_and_missing_backends),
    TEST_CASE(devices_json_has_devices_with_packages_and_backends),
    TEST_CASE(tree_shows_the_supervision_tree),
    TEST_CASE(no_daemon_is_a_clear_error),
    TEST_CASE(the_timeout_bounds_a_tcp_connect),
    TEST_CASE(version_flags_print_the_build_version),
    TEST_CASE(usage_errors_exit_2),
    TEST_CASE(every_command_takes_json),
    TEST_CASE(tree_shows_quarantined_devices_and_restarts),
    TEST_CASE(clients_lists_each_session),
    TEST_CASE(clients_use_shared_rings_where_io_threads_serve_them),
    TEST_CASE(clients_are_named_by_program_or_url),
    TEST_CASE(start_up_errors_name_the_address_and_the_cause),
    TEST_CASE(acceld_synopsis_names_every_flag),
    TEST_CASE(top_refreshes_in_place_in_a_terminal),
    TEST_CASE(any_prefers_the_cpu_backend_over_an_opencl_cpu_device),
};

TEST_MAIN(tests)
