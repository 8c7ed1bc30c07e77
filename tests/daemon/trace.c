/* Traces: `accelctl trace` of acceld while a client runs, and ACCEL_TRACE of an embedded
 * program, each checked by check_trace.py (spans nest and order, device tracks named, the
 * client named, the program's ops there); the command's errors named. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

static char out[1 << 16];

/* python3 check_trace.py FILE --client compute --ops gemm,softmax,rng */
static int check_trace(const char *file) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "python3 '%s/tests/daemon/check_trace.py' '%s' --client compute "
           "--ops gemm,softmax,rng",
           getenv("ACCEL_SOURCE_ROOT"), file);
  return system(cmd);
}

static const char *compute_example(void) {
  const char *p = getenv("COMPUTE_EXAMPLE");
  if (p == NULL)
    TEST_FAIL("COMPUTE_EXAMPLE is not set (meson sets it)");
  return p;
}

TEST(accelctl_trace_records_a_client) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, "--backends", "cpu", "--cpu-devices", "2", NULL);
  char file[160], cmd[1024];
  snprintf(file, sizeof file, "%s/trace.json", d.dir);
  /* the trace runs 3 s; the client starts within it and is done long before its end */
  snprintf(cmd, sizeof cmd,
           "'%s' --url '%s' trace --seconds 3 --output '%s' 2>'%s.err' & sleep 0.5; "
           "'%s' '%s' >/dev/null && wait $!",
           getenv("ACCELCTL"), d.url, file, file, compute_example(), d.url);
  CHECK_EQ(system(cmd), 0);
  CHECK_EQ(check_trace(file), 0);
  /* what accelctl says on stderr: how long, how many events, where */
  char err[200];
  snprintf(err, sizeof err, "%s.err", file);
  FILE *f = fopen(err, "r");
  CHECK(f != NULL);
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = '\0';
  fclose(f);
  CHECK(strstr(out, "accelctl: trace of 3.") != NULL);
  CHECK(strstr(out, " events in ") != NULL);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

TEST(accel_trace_records_an_embedded_program) {
  char dir[] = "/tmp/accel-trace-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char file[160], cmd[512];
  snprintf(file, sizeof file, "%s/embedded.json", dir);
  snprintf(cmd, sizeof cmd, "ACCEL_TRACE='%s' '%s' >/dev/null", file, compute_example());
  CHECK_EQ(system(cmd), 0);
  CHECK_EQ(check_trace(file), 0);
  /* a file that cannot be written: the program still runs and says why */
  snprintf(cmd, sizeof cmd, "ACCEL_TRACE='%s/no/such/dir/t.json' '%s' >/dev/null 2>'%s/err'", dir,
           compute_example(), dir);
  CHECK_EQ(system(cmd), 0);
  snprintf(file, sizeof file, "%s/err", dir);
  FILE *f = fopen(file, "r");
  CHECK(f != NULL);
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = '\0';
  fclose(f);
  CHECK(strstr(out, "/no/such/dir/t.json: could not be written") != NULL);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK_EQ(system(cmd), 0);
}

TEST(trace_errors_are_named) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, "--backends", "cpu", NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "trace", "--seconds", "0", NULL), 2);
  CHECK(strstr(out, "--seconds: '0' is not a whole number from 1 to 3600") != NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "trace", "--seconds", "3601", NULL), 2);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "status", "--seconds", "1", NULL), 2);
  CHECK(strstr(out, "--seconds and --output are options of trace, not of status") != NULL);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "trace", "--seconds", "1", "--output",
                  "/nonexistent-dir/t.json", NULL),
           1);
  CHECK(strstr(out, "cannot write /nonexistent-dir/t.json: No such file or directory") != NULL);
  /* one second is the shortest trace; with nothing running it holds no ops, and parses */
  char file[160];
  snprintf(file, sizeof file, "%s/empty.json", d.dir);
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d.url, "trace", "--seconds", "1", "--output", file,
                  NULL),
           0);
  CHECK(strstr(out, ": 0 events in ") != NULL);
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import json,sys; t=json.load(open(sys.argv[1]));"
           "assert t[\"otherData\"][\"events\"]==0 and t[\"otherData\"][\"dropped\"]==0, t' '%s'",
           file);
  CHECK_EQ(system(cmd), 0);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* Stopping a trace that was never started is refused, by the wire command itself. */
TEST(stop_without_start_is_refused) {
  td_daemon d;
  td_prepare(&d);
  td_start(&d, "--backends", "cpu", NULL);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_EQ(td_control(&c, PROTO_CTL_TRACE_STOP, 0), ACCEL_EINVAL);
  /* more events than acceld keeps; then at the limit; then again, smaller (a restart) */
  CHECK_EQ(td_control(&c, PROTO_CTL_TRACE_START, (4u << 20) + 1), ACCEL_EINVAL);
  CHECK_EQ(td_control(&c, PROTO_CTL_TRACE_START, 4u << 20), 0);
  CHECK_EQ(td_control(&c, PROTO_CTL_TRACE_START, 4), 0);
  td_served(&d); /* more than 4 events: the rest are counted as dropped */
  size_t len = 0;
  CHECK_EQ(td_control_data(&c, PROTO_CTL_TRACE_STOP, 0, out, sizeof out, &len), 0);
  CHECK_GT(len, 0);
  CHECK(strstr(out, "\"events\":4,\"dropped\":") != NULL);
  CHECK(strstr(out, "\"dropped\":0}") == NULL);
  td_client_close(&c);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* Pipelines `rounds` batches of 256 fills of x and takes their replies: about a thousand
 * trace events a batch (an op's begin, queueing, task and end). */
static void fill_batches(td_client *c, uint64_t x, int rounds) {
  enum { BATCH = 256 };
  for (int r = 0; r < rounds; r++) {
    proto_out o;
    proto_out_init(&o);
    uint64_t first = c->next_id;
    for (int i = 0; i < BATCH; i++)
      td_encode_fill(&o, c->next_id++, x, (uint32_t)i);
    CHECK_OK(o.err);
    td_send_raw(c, o.data, o.len, first);
    proto_out_free(&o);
    for (int i = 0; i < BATCH; i++) {
      nng_msg *m;
      CHECK_OK(td_recv(c, &m, TD_FOREVER));
      CHECK_OK(td_reply_status(m, first + (uint64_t)i, NULL));
      nng_msg_free(m);
    }
  }
}

/* Sends a control command on c without waiting: its request id. */
static uint64_t send_control(td_client *c, uint32_t command) {
  proto_out o;
  uint64_t id = c->next_id++;
  proto_control_req req = {command, 0};
  proto_out_init(&o);
  CHECK_OK(proto_encode_control(&o, id, &req));
  td_send_raw(c, o.data, o.len, id);
  proto_out_free(&o);
  return id;
}

/* A daemon of the cpu backend with `config` (NULL: the test default) and the failpoint
 * variable `var` set to `value` (NULL: unset) in its environment only. */
static void start_with_failpoint(td_daemon *d, const char *config, const char *var,
                                 const char *value) {
  td_prepare(d);
  if (config != NULL)
    td_write_config(d, config);
  if (value != NULL)
    CHECK_EQ(setenv(var, value, 1), 0);
  td_start(d, "--backends", "cpu", NULL);
  CHECK_EQ(unsetenv(var), 0);
}

/* A daemon whose trace renders take half a second longer (a failpoint: the few thousand events
 * of a test render in milliseconds), and a client a with a running trace of about 4 000
 * events; b another connection. */
static void trace_some(td_daemon *d, td_client *a, td_client *b) {
  start_with_failpoint(d, NULL, "ACCEL_TEST_TRACE_RENDER_DELAY_US", "500000");
  td_client_open(a, d->url);
  td_client_open(b, d->url);
  proto_welcome w;
  CHECK_OK(td_hello(a, &w));
  uint64_t x = td_handle(1, 1);
  CHECK_OK(td_create(a, x, ACCEL_U32, 1));
  CHECK_OK(td_control(a, PROTO_CTL_TRACE_START, 0));
  fill_batches(a, x, 4);
}

/* Stops a's trace and, right behind it on the same connection (whose frames are taken in
 * order), asks for a new one, which is refused while the stopped one renders: that reply
 * comes first (a loop that rendered itself would send the trace first). The stop's id. */
static uint64_t stop_while_rendering(td_client *a) {
  uint64_t stop = send_control(a, PROTO_CTL_TRACE_STOP);
  uint64_t start = send_control(a, PROTO_CTL_TRACE_START);
  nng_msg *m;
  CHECK_OK(td_recv(a, &m, TD_FOREVER));
  CHECK_EQ(td_reply_status(m, start, NULL), ACCEL_EBUSY);
  nng_msg_free(m);
  return stop;
}

/* The trace's reply to `stop`: whole, and holding every fill's events. */
static void check_trace_reply(td_client *a, uint64_t stop) {
  nng_msg *m;
  CHECK_OK(td_recv(a, &m, TD_FOREVER));
  proto_bytes data;
  CHECK_OK(td_reply_status(m, stop, &data));
  const char *events = memmem(data.data, data.len, "\"events\":", 9);
  CHECK(events != NULL);
  CHECK_GE(strtol(events + 9, NULL, 10), 3 * 1024);        /* up to 4 an op; an op may skip some */
  CHECK(memmem(data.data, data.len, "\n]}\n", 4) != NULL); /* whole */
  nng_msg_free(m);
}

/* A stopped trace is rendered off the loop (a million events take seconds; on the loop every
 * client waited that long): a start behind the stop is refused before the trace comes (a
 * trace cannot start while one renders: renders would pile up, each holding its events), and
 * another connection's ping is answered meanwhile. Then the trace comes, whole, and the next
 * one may start. */
TEST(a_trace_renders_off_the_loop) {
  td_daemon d;
  td_client a, b;
  trace_some(&d, &a, &b);
  uint64_t stop = stop_while_rendering(&a);
  CHECK_OK(td_control(&b, PROTO_CTL_PING, 0));
  check_trace_reply(&a, stop);
  CHECK_OK(td_control(&b, PROTO_CTL_TRACE_START, 0));
  td_client_close(&a);
  td_client_close(&b);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* acceld told to stop (SIGTERM) while a trace renders: its drain waits for the render, the
 * client gets its trace, and acceld exits cleanly (the sanitizer builds check that nothing
 * leaks or is used after its free). */
TEST(stopping_while_a_trace_renders) {
  td_daemon d;
  td_client a, b;
  trace_some(&d, &a, &b);
  uint64_t stop = stop_while_rendering(&a); /* the render is under way */
  td_signal(&d, SIGTERM);
  check_trace_reply(&a, stop);
  td_client_close(&a);
  td_client_close(&b);
  CHECK_EQ(td_wait(&d), 0);
  td_cleanup(&d);
}

/* An acceld of two shards (ACCEL_TEST_TRACE_RESTART_FAILS=`failing` if not NULL) and two
 * clients with sessions, connected together: the second goes to the shard the first is not
 * on (the one with the fewest connections). */
static void two_shards(td_daemon *d, td_client *a, td_client *b, const char *failing) {
  start_with_failpoint(d, "[daemon]\nshards = 2\n", "ACCEL_TEST_TRACE_RESTART_FAILS", failing);
  td_client_open(a, d->url);
  td_client_open(b, d->url);
  proto_welcome w;
  CHECK_OK(td_hello(a, &w));
  CHECK_OK(td_hello(b, &w));
}

/* Two shards (a world each): a and b, connected together, are served by different shards; a
 * trace started on a and stopped on b holds both clients' fills, each shard's ops and device
 * tracks kept apart (check_trace.py --shards 2), and one render at a time still holds. */
TEST(a_trace_covers_every_shard) {
  td_daemon d;
  td_client a, b;
  two_shards(&d, &a, &b, NULL);
  uint64_t x = td_handle(1, 1);
  CHECK_OK(td_create(&a, x, ACCEL_U32, 1));
  CHECK_OK(td_create(&b, x, ACCEL_U32, 1));
  CHECK_EQ(td_control(&b, PROTO_CTL_TRACE_STOP, 0), ACCEL_EINVAL); /* none runs yet */
  CHECK_OK(td_control(&a, PROTO_CTL_TRACE_START, 0));
  fill_batches(&a, x, 2);
  fill_batches(&b, x, 2);
  uint64_t stop = send_control(&b, PROTO_CTL_TRACE_STOP);
  nng_msg *m;
  CHECK_OK(td_recv(&b, &m, TD_FOREVER));
  proto_bytes data;
  CHECK_OK(td_reply_status(m, stop, &data));
  char file[160];
  snprintf(file, sizeof file, "%s/shards.json", d.dir);
  FILE *f = fopen(file, "w");
  CHECK(f != NULL);
  CHECK_EQ(fwrite(data.data, 1, data.len, f), data.len);
  CHECK_EQ(fclose(f), 0);
  nng_msg_free(m);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "python3 '%s/tests/daemon/check_trace.py' '%s' --ops fill --shards 2",
           getenv("ACCEL_SOURCE_ROOT"), file);
  CHECK_EQ(system(cmd), 0);
  CHECK_EQ(td_control(&a, PROTO_CTL_TRACE_STOP, 0), ACCEL_EINVAL); /* stopped on every shard */
  td_client_close(&a);
  td_client_close(&b);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

/* A start that fails in one shard's world (a test failpoint: out of memory in shard 1 on any
 * start but the first) leaves no trace running in any: not the one just started in shard 0,
 * nor the one shard 1 ran before; a stop then has nothing to stop. */
TEST(a_failed_start_leaves_no_shard_tracing) {
  td_daemon d;
  td_client a, b;
  two_shards(&d, &a, &b, "1");
  uint64_t x = td_handle(1, 1);
  CHECK_OK(td_create(&b, x, ACCEL_U32, 1));
  CHECK_OK(td_control(&a, PROTO_CTL_TRACE_START, 0)); /* the first: every shard traces */
  fill_batches(&b, x, 1);
  CHECK_EQ(td_control(&a, PROTO_CTL_TRACE_START, 0), ACCEL_ENOMEM);
  CHECK_EQ(td_control(&b, PROTO_CTL_TRACE_STOP, 0), ACCEL_EINVAL);
  td_client_close(&a);
  td_client_close(&b);
  CHECK_EQ(td_stop(&d), 0);
  td_cleanup(&d);
}

static const test_case tests[] = {
    TEST_CASE(accelctl_trace_records_a_client), TEST_CASE(accel_trace_records_an_embedded_program),
    TEST_CASE(trace_errors_are_named),          TEST_CASE(stop_without_start_is_refused),
    TEST_CASE(a_trace_renders_off_the_loop),    TEST_CASE(stopping_while_a_trace_renders),
    TEST_CASE(a_trace_covers_every_shard),      TEST_CASE(a_failed_start_leaves_no_shard_tracing),
};

TEST_MAIN(tests)
