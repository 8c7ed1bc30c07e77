/* acceld's [security] section: the keys as parsed (daemon/config.c linked in), plain tcp://
 * refused unless allowed, user kernels allowed per transport (user_kernels), and tls+tcp://
 * end to end through libaccel: the daemon's certificate
 * verified by the client (ACCEL_TLS_CA, ACCEL_TLS_SERVER_NAME), client certificates required
 * by tls_verify_clients, and the daemon refusing to start without its key.
 *
 * The certificates are made at test time with the openssl CLI in a temporary directory: a CA,
 * a second CA nobody trusts, a server certificate for "localhost" and "127.0.0.1" (as a DNS
 * name too: mbed TLS, nng's TLS engine on Debian, does not match IP addresses), and a client
 * certificate from each CA. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sched.h>
#include <sys/socket.h>

#include "accel/accel.h"
#include "backends/backend.h"
#include "daemon/config.h"
#include "server/server.h"
#include "util.h"

/* ---- helpers ---- */

static const char *pem(const char *file) {
  return td_tls_pem(file);
}

static void set_or_unset(const char *var, const char *value) {
  if (value)
    CHECK_EQ(setenv(var, value, 1), 0);
  else
    CHECK_EQ(unsetenv(var), 0);
}

/* The client's TLS settings for the next accel_open (NULL: unset). */
static void client_env(const char *ca, const char *cert, const char *key, const char *name) {
  set_or_unset("ACCEL_TLS_CA", ca);
  set_or_unset("ACCEL_TLS_CERT", cert);
  set_or_unset("ACCEL_TLS_KEY", key);
  set_or_unset("ACCEL_TLS_SERVER_NAME", name);
}

/* Writes a buffer, reads it back, compares. */
static void roundtrip(accel_ctx *ctx, float seed) {
  enum { N = 1000 };
  static float in[N], out[N];
  for (int i = 0; i < N; i++) {
    in[i] = seed + (float)i * 0.25f;
    out[i] = -1.0f;
  }
  accel_buffer b;
  accel_future *f;
  CHECK_OK(accel_buffer_create(ctx, ACCEL_F32, N, &b));
  CHECK_OK(accel_write(ctx, b, 0, in, N, NULL));
  CHECK_OK(accel_read(ctx, b, 0, out, N, &f));
  CHECK_OK(accel_future_wait(f, -1));
  accel_future_release(f);
  CHECK(memcmp(in, out, sizeof in) == 0);
  CHECK_OK(accel_buffer_destroy(ctx, b));
}

/* A [security] section with the test's server certificate and `extra` lines. */
static void tls_config(td_daemon *d, const char *extra) {
  char text[1024];
  snprintf(text, sizeof text, "[security]\ntls_cert = %s\ntls_key = %s\n%s", pem("server.pem"),
           pem("server.key"), extra);
  td_write_config(d, text);
}

/* Starts acceld with its ipc socket and a tls+tcp:// listener; *url gets the latter. */
static void start_tls(td_daemon *d, char *url, size_t len) {
  snprintf(url, len, "tls+tcp://127.0.0.1:%d", td_free_port());
  td_start(d, "--listen", url, NULL);
}

static int open_with(const char *url, accel_ctx **ctx) {
  *ctx = NULL;
  return accel_open(ctx, url);
}

/* ---- the configuration ---- */

static int read_config(const char *text, acd_config *c, const acd_flags *f, char *err, size_t len) {
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, text);
  acd_flags flags = f ? *f : (acd_flags){.cpu_devices = -1};
  flags.config_path = d.conf;
  err[0] = '\0';
  int rc = acd_config_read(c, &flags, err, len);
  td_cleanup(&d);
  return rc;
}

TEST(security_keys_are_parsed) {
  char text[1024], err[320];
  const struct passwd *me = getpwuid(getuid());
  CHECK(me != NULL);
  snprintf(text, sizeof text,
           "[security]\nallow_users = root, 4242\nallow_users = %s\n"
           "allow_groups = root,777\nallow_any_local = yes\nallow_plain_tcp = true\n"
           "tls_cert = /etc/acceld/cert.pem\ntls_key = /etc/acceld/key.pem\n"
           "tls_ca = /etc/acceld/ca.pem\ntls_verify_clients = on\n",
           me->pw_name);
  acd_config c;
  CHECK_OK(read_config(text, &c, NULL, err, sizeof err));
  CHECK_EQ(c.nallow_uids, 3);
  CHECK_EQ(c.allow_uids[0], 0);
  CHECK_EQ(c.allow_uids[1], 4242);
  CHECK_EQ(c.allow_uids[2], getuid());
  CHECK_EQ(c.nallow_gids, 2);
  CHECK_EQ(c.allow_gids[0], 0);
  CHECK_EQ(c.allow_gids[1], 777);
  srv_security sec;
  acd_config_security(&c, &sec);
  CHECK(sec.allow_uids == c.allow_uids && sec.nallow_uids == 3 && sec.nallow_gids == 2);
  CHECK(sec.allow_any_local && sec.allow_plain_tcp && sec.tls_verify_clients);
  CHECK_STR_EQ(sec.tls_cert, "/etc/acceld/cert.pem");
  CHECK_STR_EQ(sec.tls_key, "/etc/acceld/key.pem");
  CHECK_STR_EQ(sec.tls_ca, "/etc/acceld/ca.pem");
  acd_config same;
  CHECK_OK(read_config(text, &same, NULL, err, sizeof err));
  CHECK(acd_config_security_same(&c, &same));
  same.allow_uids[1] = 4243;
  CHECK(!acd_config_security_same(&c, &same));
  acd_config_free(&same);
  acd_config_free(&c);
}

TEST(security_defaults_and_the_plain_tcp_flag) {
  char err[320];
  acd_config c;
  CHECK_OK(read_config("", &c, NULL, err, sizeof err));
  CHECK(c.nallow_uids == 0 && c.nallow_gids == 0 && !c.allow_any_local);
  CHECK(!c.allow_plain_tcp && !c.tls_verify_clients);
  CHECK(c.tls_cert == NULL && c.tls_key == NULL && c.tls_ca == NULL);
  acd_config_free(&c);
  acd_flags f = {.cpu_devices = -1, .allow_plain_tcp = true};
  CHECK_OK(read_config("[security]\nallow_plain_tcp = false\n", &c, &f, err, sizeof err));
  CHECK(c.allow_plain_tcp); /* the flag wins over the file */
  acd_config_free(&c);
}

static void expect_config_error(const char *text, const char *what) {
  char err[320];
  acd_config c;
  CHECK_ERR(read_config(text, &c, NULL, err, sizeof err), ACCEL_EINVAL);
  if (strstr(err, what) == NULL)
    TEST_FAIL("expected \"%s\" in \"%s\"", what, err);
}

/* [devices] pinned_max: a size; 0 turns the pin cache off; the largest value there is minus
 * one is the most (UINT64_MAX means "off" inside), one more is an error. */
TEST(pinned_max_key) {
  char err[320];
  acd_config c;
  CHECK_OK(read_config("", &c, NULL, err, sizeof err));
  CHECK_EQ(c.pinned_max, 0); /* the default: a quarter of the host's memory */
  acd_config_free(&c);
  CHECK_OK(read_config("[devices]\npinned_max = 16G\n", &c, NULL, err, sizeof err));
  CHECK(c.pinned_max == 16ull << 30);
  acd_config_free(&c);
  CHECK_OK(read_config("[devices]\npinned_max = 0\n", &c, NULL, err, sizeof err));
  CHECK(c.pinned_max == BE_PINNED_OFF);
  acd_config_free(&c);
  CHECK_OK(
      read_config("[devices]\npinned_max = 18446744073709551614\n", &c, NULL, err, sizeof err));
  CHECK(c.pinned_max == UINT64_MAX - 1);
  acd_config_free(&c);
  expect_config_error("[devices]\npinned_max = 18446744073709551615\n", "acceld.conf:2");
  expect_config_error("[devices]\npinned_max = -1\n", "acceld.conf:2");
  expect_config_error("[devices]\npinned_max = lots\n", "acceld.conf:2");
}

/* [daemon] exit_timeout_ms: 5 s by default, 0 (no bound) to an hour; one past is an error. */
TEST(exit_timeout_key) {
  char err[320];
  acd_config c;
  CHECK_OK(read_config("", &c, NULL, err, sizeof err));
  CHECK_EQ(c.exit_timeout_ms, 5000);
  acd_config_free(&c);
  CHECK_OK(read_config("[daemon]\nexit_timeout_ms = 0\n", &c, NULL, err, sizeof err));
  CHECK_EQ(c.exit_timeout_ms, 0);
  acd_config_free(&c);
  CHECK_OK(read_config("[daemon]\nexit_timeout_ms = 3600000\n", &c, NULL, err, sizeof err));
  CHECK_EQ(c.exit_timeout_ms, 3600000);
  acd_config_free(&c);
  expect_config_error("[daemon]\nexit_timeout_ms = 3600001\n", "acceld.conf:2");
  expect_config_error("[daemon]\nexit_timeout_ms = -1\n", "acceld.conf:2");
}

/* The config `text` (which must be valid) gives, as acceld would read it (`auto` resolved),
 * with nothing allocated left: its integer keys only. */
static acd_config valid_config(const char *text) {
  char err[320];
  acd_config c, kept;
  CHECK_OK(read_config(text, &c, NULL, err, sizeof err));
  kept = c;
  acd_config_free(&c);
  return kept;
}

static uint32_t io_threads_of(const char *text) {
  return valid_config(text).io_threads;
}

/* [daemon] io_threads: auto by default, 0 (the loop) to 64; 65 is an error. */
TEST(io_threads_key) {
  CHECK(io_threads_of("") == SRV_IO_THREADS_AUTO);
  CHECK_EQ(io_threads_of("[daemon]\nio_threads = 0\n"), 0);
  CHECK(io_threads_of("[daemon]\nio_threads = auto\n") == SRV_IO_THREADS_AUTO);
  CHECK_EQ(io_threads_of("[daemon]\nio_threads = 64\n"), 64);
  expect_config_error("[daemon]\nio_threads = 65\n", "acceld.conf:2");
  expect_config_error("[daemon]\nio_threads = -1\n", "acceld.conf:2");
}

static uint32_t shards_of(const char *text) {
  return valid_config(text).shards;
}

/* [daemon] shards: auto by default (one per 16 cores, 1 to 4), 1 to 16; 0 and 17 are errors. */
TEST(shards_key) {
  cpu_set_t set; /* auto counts the cores acceld may run on */
  CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  uint32_t here = srv_shards_for_cores(CPU_COUNT(&set));
  CHECK_EQ(shards_of(""), here);
  CHECK_EQ(shards_of("[daemon]\nshards = auto\n"), here);
  CHECK_EQ(shards_of("[daemon]\nshards = 1\n"), 1);
  CHECK_EQ(shards_of("[daemon]\nshards = 16\n"), 16);
  expect_config_error("[daemon]\nshards = 17\n", "acceld.conf:2");
  expect_config_error("[daemon]\nshards = 0\n", "acceld.conf:2");
  expect_config_error("[daemon]\nshards = some\n", "acceld.conf:2");
  static const long cores[] = {-1, 0, 1, 2, 7, 8, 15, 16, 24, 31, 32, 33, 64, 128};
  static const uint32_t want[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 4, 4};
  for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
    CHECK_EQ(srv_shards_for_cores(cores[i]), want[i]);
}

TEST(unknown_names_and_bad_values_are_errors_with_their_line) {
  expect_config_error("[security]\nallow_any_local = no\nallow_users = root, no-such-user-h2\n",
                      "acceld.conf:3: [security] allow_users: no such user 'no-such-user-h2'");
  expect_config_error("[security]\nallow_groups = no-such-group-h2\nallow_users = nobody-h2\n",
                      "acceld.conf:2: [security] allow_groups: no such group 'no-such-group-h2'");
  expect_config_error("[security]\nallow_users = 4294967295\n",
                      "acceld.conf:2: [security] allow_users: user id 4294967295 is out of range");
  expect_config_error("[security]\n\ntls_verify_clients = maybe\n",
                      "acceld.conf:3: [security] tls_verify_clients = maybe: unknown key");
  expect_config_error("[security]\ntls_certificate = /x.pem\n",
                      "acceld.conf:2: [security] tls_certificate = /x.pem: unknown key");
  /* and acceld says so and does not start */
  td_daemon d;
  td_prepare(&d);
  td_write_config(&d, "[security]\nallow_users = no-such-user-h2\n");
  CHECK_EQ(td_start_expect_exit(&d, NULL), 1);
  CHECK(strstr(td_log(&d), "acceld.conf:2: [security] allow_users: no such user") != NULL);
  td_cleanup(&d);
}

/* ---- plain tcp:// ---- */

TEST(plain_tcp_is_refused_by_default) {
  td_daemon d;
  char url[64], want[160];
  td_prepare(&d);
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", td_free_port());
  CHECK_EQ(td_start_expect_exit(&d, "--listen", url, NULL), 1);
  snprintf(want, sizeof want, "cannot listen on %s: plain TCP has no encryption", url);
  if (strstr(td_log(&d), want) == NULL)
    TEST_FAIL("expected \"%s\" in the log:\n%s", want, td_log(&d));
  td_cleanup(&d);
}

static void plain_tcp_serves(td_daemon *d, const char *url) {
  td_client c;
  td_client_open(&c, url);
  CHECK_OK(td_hello(&c, NULL));
  uint32_t in[4] = {1, 2, 3, 0xdeadbeef}, out[4] = {0};
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 4));
  CHECK_OK(td_write_u32(&c, td_handle(1, 1), in, 4));
  CHECK_OK(td_read_u32(&c, td_handle(1, 1), out, 4));
  CHECK(memcmp(in, out, sizeof in) == 0);
  td_client_close(&c);
  CHECK(strstr(td_log(d), "plain TCP, no encryption and no authentication") != NULL);
  CHECK_EQ(td_stop(d), 0);
}

TEST(plain_tcp_with_allow_plain_tcp) {
  td_daemon d;
  char url[64];
  td_prepare(&d);
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", td_free_port());
  td_start(&d, "--listen", url, "--allow-plain-tcp", NULL);
  plain_tcp_serves(&d, url);
  td_write_config(&d, "[security]\nallow_plain_tcp = true\n");
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", td_free_port());
  td_start(&d, "--listen", url, NULL);
  plain_tcp_serves(&d, url);
  td_cleanup(&d);
}

/* ---- user_kernels: where clients may load modules ---- */

TEST(user_kernels_key_and_flag) {
  char err[320];
  acd_config c, other;
  srv_security sec;
  CHECK_OK(read_config("", &c, NULL, err, sizeof err));
  CHECK_EQ(c.user_kernels, SRV_USER_KERNELS_LOCAL); /* the default */
  acd_config_free(&c);
  static const struct {
    const char *text;
    srv_user_kernels want;
  } cases[] = {{"[security]\nuser_kernels = local\n", SRV_USER_KERNELS_LOCAL},
               {"[security]\nuser_kernels = all\n", SRV_USER_KERNELS_ALL},
               {"[security]\nuser_kernels = None\n", SRV_USER_KERNELS_NONE}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CHECK_OK(read_config(cases[i].text, &c, NULL, err, sizeof err));
    acd_config_security(&c, &sec);
    CHECK_EQ(sec.user_kernels, cases[i].want);
    acd_config_free(&c);
  }
  expect_config_error("[security]\nuser_kernels = some\n",
                      "acceld.conf:2: [security] user_kernels = some: unknown key or bad value");
  acd_flags f = {.cpu_devices = -1, .user_kernels = "none"};
  CHECK_OK(read_config("[security]\nuser_kernels = all\n", &c, &f, err, sizeof err));
  CHECK_EQ(c.user_kernels, SRV_USER_KERNELS_NONE); /* the flag wins over the file */
  CHECK_OK(read_config("[security]\nuser_kernels = all\n", &other, NULL, err, sizeof err));
  CHECK(!acd_config_security_same(&c, &other)); /* a reload says: on restart */
  acd_config_free(&other);
  acd_config_free(&c);
  f.user_kernels = "everywhere";
  CHECK_ERR(read_config("", &c, &f, err, sizeof err), ACCEL_EINVAL);
  CHECK(strstr(err, "--user-kernels everywhere: local, all or none") != NULL);
}

/* A MODULE_LOAD over a fresh connection to url: its status. Which devices build what does not
 * matter here (a machine with none says ACCEL_ENOTSUP): only whether it was refused. */
static int module_load_status(const char *url) {
  static const char code[] = "__kernel void k(__global float *x) { x[0] = 1.0f; }";
  td_client c;
  td_client_open(&c, url);
  CHECK_OK(td_hello(&c, NULL));
  dev_op op = {.h = {.kind = DEV_OP_MODULE_LOAD, .device = ACCEL_DEVICE_ANY}, .nbufs = 1};
  op.bufs[0].handle = td_handle(1, 1);
  op.u.module.source = ACCEL_SOURCE_OPENCL;
  op.u.module.code = code;
  op.u.module.len = sizeof code - 1;
  op.u.module.options = "-DN=4";
  proto_out o;
  uint64_t id = c.next_id++;
  proto_out_init(&o);
  CHECK_OK(proto_encode_op(&o, id, &op, (proto_bytes){NULL, 0}));
  int status = td_call(&c, &o, id);
  td_client_close(&c);
  return status;
}

/* Starts the daemon on its ipc:// socket and a plain tcp:// port (*tcp), with `extra` (a flag
 * or NULL). */
static void start_both(td_daemon *d, char *tcp, size_t len, const char *extra) {
  snprintf(tcp, len, "tcp://127.0.0.1:%d", td_free_port());
  td_start(d, "--listen", tcp, "--allow-plain-tcp", extra, NULL);
}

TEST(user_kernels_are_gated_per_transport) {
  td_daemon d;
  char tcp[64];
  td_prepare(&d);
  start_both(&d, tcp, sizeof tcp, NULL); /* default: local */
  CHECK(module_load_status(d.url) != ACCEL_EPERM);
  CHECK_ERR(module_load_status(tcp), ACCEL_EPERM);
  CHECK_EQ(td_stop(&d), 0);
  start_both(&d, tcp, sizeof tcp, "--user-kernels=all");
  CHECK(module_load_status(d.url) != ACCEL_EPERM);
  CHECK(module_load_status(tcp) != ACCEL_EPERM);
  CHECK_EQ(td_stop(&d), 0);
  td_write_config(&d, "[security]\nuser_kernels = none\n");
  start_both(&d, tcp, sizeof tcp, NULL);
  CHECK_ERR(module_load_status(d.url), ACCEL_EPERM);
  CHECK_ERR(module_load_status(tcp), ACCEL_EPERM);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* ---- tls+tcp:// ---- */

TEST(tls_client_that_trusts_the_ca_works) {
  td_daemon d;
  char url[64];
  accel_ctx *ctx;
  td_tls_certs();
  td_prepare(&d);
  tls_config(&d, "");
  start_tls(&d, url, sizeof url);
  CHECK(strstr(td_log(&d), "client certificates not asked for") != NULL);
  client_env(pem("ca.pem"), NULL, NULL, NULL); /* the name: the URL's host */
  CHECK_OK(open_with(url, &ctx));
  roundtrip(ctx, 1.5f);
  accel_close(ctx);
  client_env(pem("ca.pem"), NULL, NULL, "localhost");
  CHECK_OK(open_with(url, &ctx));
  roundtrip(ctx, -7.0f);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(tls_client_without_the_ca_is_refused_and_others_go_on) {
  td_daemon d;
  char url[64];
  accel_ctx *good, *bad;
  td_tls_certs();
  td_prepare(&d);
  tls_config(&d, "");
  start_tls(&d, url, sizeof url);
  client_env(pem("ca.pem"), NULL, NULL, NULL);
  CHECK_OK(open_with(url, &good));
  client_env(NULL, NULL, NULL, NULL);
  CHECK_ERR(open_with(url, &bad), ACCEL_EPERM); /* no CA: nothing can be verified */
  client_env(pem("other-ca.pem"), NULL, NULL, NULL);
  CHECK_ERR(open_with(url, &bad), ACCEL_EPERM); /* a CA that did not sign the daemon's */
  client_env(pem("ca.pem"), NULL, NULL, "elsewhere.example");
  CHECK_ERR(open_with(url, &bad), ACCEL_EPERM); /* the right CA, another name */
  client_env(pem("no-such-ca.pem"), NULL, NULL, NULL);
  CHECK_ERR(open_with(url, &bad), ACCEL_EINVAL);
  roundtrip(good, 3.0f); /* the daemon never noticed */
  client_env(pem("ca.pem"), NULL, NULL, NULL);
  CHECK_OK(open_with(url, &bad));
  roundtrip(bad, 4.0f);
  accel_close(bad);
  accel_close(good);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(tls_nothing_listening_is_closed) {
  char url[64];
  accel_ctx *ctx;
  td_tls_certs();
  snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", td_free_port());
  client_env(pem("ca.pem"), NULL, NULL, NULL);
  CHECK_ERR(open_with(url, &ctx), ACCEL_ECLOSED);
}

/* A peer that takes the connection and never answers the handshake: nng 1.5.2 alone would
 * wait forever; libaccel gives up after 10 s. */
TEST(tls_silent_peer_times_out) {
  char url[64];
  accel_ctx *ctx;
  td_tls_certs();
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_GE(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  CHECK_EQ(listen(fd, 4), 0); /* the kernel completes the connection; nobody reads */
  CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", ntohs(a.sin_port));
  client_env(pem("ca.pem"), NULL, NULL, NULL);
  uint64_t t0 = test_now_ms();
  CHECK_ERR(open_with(url, &ctx), ACCEL_ECLOSED);
  uint64_t took = test_now_ms() - t0;
  CHECK_GE(took, 9000);
  CHECK_LT(took, 20000 * (test_under_valgrind() ? 3 : 1));
  close(fd);
}

TEST(tls_verify_clients_requires_a_client_certificate) {
  td_daemon d;
  char url[64], extra[256];
  accel_ctx *ctx;
  td_tls_certs();
  td_prepare(&d);
  snprintf(extra, sizeof extra, "tls_ca = %s\ntls_verify_clients = true\n", pem("ca.pem"));
  tls_config(&d, extra);
  start_tls(&d, url, sizeof url);
  CHECK(strstr(td_log(&d), "client certificates required") != NULL);
  client_env(pem("ca.pem"), NULL, NULL, NULL);
  CHECK_ERR(open_with(url, &ctx), ACCEL_EPERM); /* none */
  client_env(pem("ca.pem"), pem("rogue.pem"), pem("rogue.key"), NULL);
  CHECK_ERR(open_with(url, &ctx), ACCEL_EPERM); /* signed by a CA the daemon does not trust */
  client_env(pem("ca.pem"), pem("client.pem"), NULL, NULL);
  CHECK_ERR(open_with(url, &ctx), ACCEL_EINVAL); /* a certificate without its key */
  client_env(pem("ca.pem"), pem("client.pem"), pem("client.key"), NULL);
  CHECK_OK(open_with(url, &ctx));
  roundtrip(ctx, 9.0f);
  accel_close(ctx);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* acceld exits 1 and its log says `want`. */
static void expect_refusal(td_daemon *d, const char *url, const char *want) {
  CHECK_EQ(td_start_expect_exit(d, "--listen", url, NULL), 1);
  if (strstr(td_log(d), want) == NULL)
    TEST_FAIL("expected \"%s\" in the log:\n%s", want, td_log(d));
}

TEST(tls_without_a_usable_key_refuses_to_start) {
  td_daemon d;
  char url[64], text[512], want[256];
  td_tls_certs();
  td_prepare(&d);
  snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", td_free_port());
  snprintf(text, sizeof text, "[security]\ntls_cert = %s\ntls_key = %s\n", pem("server.pem"),
           pem("missing.key"));
  td_write_config(&d, text);
  snprintf(want, sizeof want, "cannot listen on %s: tls_key %s: No such file or directory", url,
           pem("missing.key"));
  expect_refusal(&d, url, want);
  td_write_config(&d, "");
  expect_refusal(&d, url, "TLS needs tls_cert and tls_key");
  tls_config(&d, "tls_verify_clients = yes\n");
  expect_refusal(&d, url, "tls_verify_clients needs tls_ca");
  snprintf(text, sizeof text, "tls_ca = %s\n", pem("missing-ca.pem"));
  tls_config(&d, text);
  expect_refusal(&d, url, "missing-ca.pem: No such file or directory");
  td_cleanup(&d);
}

TEST(sighup_security_change_waits_for_a_restart) {
  td_daemon d;
  char url[64];
  td_tls_certs();
  td_prepare(&d);
  tls_config(&d, "");
  start_tls(&d, url, sizeof url);
  tls_config(&d, "allow_users = root\n");
  td_signal(&d, SIGHUP);
  TEST_WAIT_FOR(strstr(td_log(&d), "configuration reloaded") != NULL, 20);
  CHECK(strstr(td_log(&d), "reload: [security] changed: takes effect on restart") != NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(security_keys_are_parsed),
    TEST_CASE(security_defaults_and_the_plain_tcp_flag),
    TEST_CASE(pinned_max_key),
    TEST_CASE(exit_timeout_key),
    TEST_CASE(io_threads_key),
    TEST_CASE(shards_key),
    TEST_CASE(unknown_names_and_bad_values_are_errors_with_their_line),
    TEST_CASE(plain_tcp_is_refused_by_default),
    TEST_CASE(plain_tcp_with_allow_plain_tcp),
    TEST_CASE(user_kernels_key_and_flag),
    TEST_CASE(user_kernels_are_gated_per_transport),
    TEST_CASE(tls_client_that_trusts_the_ca_works),
    TEST_CASE(tls_client_without_the_ca_is_refused_and_others_go_on),
    TEST_CASE(tls_nothing_listening_is_closed),
    TEST_CASE(tls_silent_peer_times_out),
    TEST_CASE(tls_verify_clients_requires_a_client_certificate),
    TEST_CASE(tls_without_a_usable_key_refuses_to_start),
    TEST_CASE(sighup_security_change_waits_for_a_restart),
};

TEST_MAIN(tests)
