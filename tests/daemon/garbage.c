/* Malformed input never crashes or hangs the daemon: garbage from nngcat, truncated and
 * corrupted frames, frames over max_message, frames in the wrong order, the fuzz corpus and
 * random mutations of it. After each, the daemon still answers. */
#include <dirent.h>

#include "proto/local.h"
#include "util.h"

static char out[1 << 16];

/* A small max_message so that "oversized" is cheap to send. */
static void start(td_daemon *d) {
  td_prepare(d);
  td_write_config(d, "[limits]\nmax_message = 65536\n");
  td_start(d, NULL);
}

static void still_serves(td_daemon *d) {
  CHECK_EQ(td_ctl(out, sizeof out, "--url", d->url, "ping", NULL), 0);
}

/* The daemon logs a connection's end when its socket has closed: soon after the peer sees it
 * (how soon is the machine's business: no limit but the watchdog's). */
static void wait_log(td_daemon *d, const char *text) {
  TEST_WAIT_FOR(strstr(td_log(d), text) != NULL, 20);
}

static void finish(td_daemon *d) {
  still_serves(d);
  /* The bad frames came on other connections: the daemon may read them after our status. */
  TEST_WAIT_FOR(td_status_field(d, "frames_bad") > 0, 20);
  CHECK_EQ(td_stop(d), 0);
  td_cleanup(d);
}

/* A well-formed frame header with the given fields, then `body_len` zero bytes. */
static size_t frame(uint8_t *buf, uint32_t magic, uint16_t version, uint16_t type,
                    uint32_t body_len, uint64_t id) {
  memset(buf, 0, PROTO_HEADER_SIZE + body_len);
  for (int i = 0; i < 4; i++)
    buf[i] = (uint8_t)(magic >> (8 * i)), buf[12 + i] = (uint8_t)(body_len >> (8 * i));
  buf[4] = (uint8_t)version, buf[5] = (uint8_t)(version >> 8);
  buf[6] = (uint8_t)type, buf[7] = (uint8_t)(type >> 8);
  for (int i = 0; i < 8; i++)
    buf[16 + i] = (uint8_t)(id >> (8 * i));
  return PROTO_HEADER_SIZE + body_len;
}

static int raw_call(td_client *c, const void *bytes, size_t len, uint64_t id) {
  td_send_raw(c, bytes, len, id);
  nng_msg *m;
  CHECK_EQ(td_recv(c, &m, TD_FOREVER), 0);
  int status = td_reply_status(m, id, NULL);
  nng_msg_free(m);
  return status;
}

TEST(nngcat_garbage) {
  td_daemon d;
  start(&d);
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "timeout 2 nngcat --req0 --dial '%s' --data 'hello, is this a daemon?' "
           "--recv-timeout 1 --count 1 >/dev/null 2>&1; "
           "head -c 300 /dev/urandom > '%s/junk'; "
           "timeout 2 nngcat --req0 --dial '%s' --file '%s/junk' --recv-timeout 1 "
           "--count 1 >/dev/null 2>&1; true",
           d.url, d.dir, d.url, d.dir);
  CHECK_EQ(system(cmd), 0);
  finish(&d);
}

/* Bytes that are not accel's get no answer: the local transport closes the connection (a
 * stream cannot be resynchronised), logging why. Fewer bytes than a header wait for more. */
TEST(short_and_foreign_frames_are_refused) {
  td_daemon d;
  start(&d);
  td_client c;
  td_client_open(&c, d.url);
  uint8_t junk[10] = {1, 2, 3};
  td_send_raw(&c, junk, sizeof junk, 1);
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, 300), NNG_ETIMEDOUT);
  proto_out o;
  proto_control_req req = {PROTO_CTL_PING, 0};
  proto_out_init(&o);
  CHECK_OK(proto_encode_control(&o, 2, &req));
  td_send_raw(&c, o.data, o.len, 2); /* the stream now starts with the junk */
  proto_out_free(&o);
  CHECK_EQ(td_recv(&c, &m, TD_FOREVER), NNG_ECLOSED);
  td_client_close(&c);
  wait_log(&d, "not an accel frame: closed");
  finish(&d);
}

TEST(bad_headers_get_eproto_with_the_request_id) {
  td_daemon d;
  start(&d);
  td_client c;
  td_client_open(&c, d.url);
  uint8_t buf[256];
  CHECK_ERR(raw_call(&c, buf, frame(buf, PROTO_MAGIC, PROTO_VERSION, 99, 0, 7), 7),
            ACCEL_EPROTO); /* unknown type */
  CHECK_ERR(raw_call(&c, buf, frame(buf, PROTO_MAGIC, PROTO_VERSION, PROTO_REPLY, 8, 8), 8),
            ACCEL_EPROTO); /* a daemon's frame */
  /* (A body length that disagrees with the message is an nng matter: on the local stream
   * the header's length delimits the frame; see half_written_frames_wait_then_close.) */
  size_t n = frame(buf, PROTO_MAGIC, PROTO_VERSION, PROTO_CONTROL, 16, 10);
  buf[8] = 1; /* flags must be 0 */
  CHECK_ERR(raw_call(&c, buf, n, 10), ACCEL_EPROTO);
  n = frame(buf, PROTO_MAGIC, PROTO_VERSION, PROTO_CONTROL, 16, 11);
  buf[PROTO_HEADER_SIZE] = 77; /* unknown control command */
  CHECK_ERR(raw_call(&c, buf, n, 11), ACCEL_EPROTO);
  td_client_close(&c);
  finish(&d);
}

/* On the local stream a header promises its body: the daemon waits for it (serving others
 * meanwhile) and logs a peer that hangs up half-way. */
TEST(half_written_frames_wait_then_close) {
  td_daemon d;
  start(&d);
  td_client c;
  td_client_open(&c, d.url);
  uint8_t buf[256];
  size_t n = frame(buf, PROTO_MAGIC, PROTO_VERSION, PROTO_CONTROL, 16, 9);
  td_send_raw(&c, buf, n - 5, 9);
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, 300), NNG_ETIMEDOUT);
  still_serves(&d);
  td_client_close(&c);
  wait_log(&d, "closed mid-frame");
  finish(&d);
}

TEST(truncated_and_corrupted_ops_get_eproto) {
  td_daemon d;
  start(&d);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 16));
  proto_out o;
  proto_out_init(&o);
  td_encode_fill(&o, 50, td_handle(1, 1), 3);
  for (size_t cut = 1; cut < o.len - PROTO_HEADER_SIZE; cut += 3) {
    uint8_t buf[256];
    memcpy(buf, o.data, o.len - cut);
    uint32_t body = (uint32_t)(o.len - cut - PROTO_HEADER_SIZE);
    for (int i = 0; i < 4; i++)
      buf[12 + i] = (uint8_t)(body >> (8 * i)); /* a consistent header, a short body */
    CHECK_ERR(raw_call(&c, buf, o.len - cut, 50), ACCEL_EPROTO);
  }
  uint8_t bad[256];
  memcpy(bad, o.data, o.len);
  bad[PROTO_HEADER_SIZE] = 200; /* op kind out of range */
  CHECK_ERR(raw_call(&c, bad, o.len, 50), ACCEL_EPROTO);
  proto_out_free(&o);
  CHECK_OK(td_fill(&c, td_handle(1, 1), 3)); /* the session is unharmed */
  /* A buffer of no elements, which the library never sends: refused by the decoder too. */
  CHECK_ERR(td_create(&c, td_handle(2, 1), ACCEL_U32, 0), ACCEL_EPROTO);
  CHECK_OK(td_create(&c, td_handle(2, 1), ACCEL_U32, 1));
  td_client_close(&c);
  finish(&d);
}

TEST(oversized_frames_are_refused) {
  td_daemon d;
  start(&d);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  /* Just over max_message: the header says so, the daemon answers ELIMIT and closes the
   * stream (it does not read a body it refuses; the frame at the limit is tested in
   * oversized_frames_at_the_limit). */
  static uint8_t big[1 << 20];
  frame(big, PROTO_MAGIC, PROTO_VERSION, PROTO_CONTROL, 65536 + 1 - 24, 60);
  td_send_raw(&c, big, PROTO_HEADER_SIZE, 60);
  nng_msg *m;
  CHECK_EQ(td_recv(&c, &m, TD_FOREVER), 0);
  CHECK_ERR(td_reply_status(m, 60, NULL), ACCEL_ELIMIT);
  nng_msg_free(m);
  CHECK_EQ(td_recv(&c, &m, TD_FOREVER), NNG_ECLOSED);
  td_client_close(&c);
  wait_log(&d, "frame over max_message");
  /* Exactly max_message is a frame like any other (here: a control with trailing bytes). */
  td_client_open(&c, d.url);
  size_t n = frame(big, PROTO_MAGIC, PROTO_VERSION, PROTO_CONTROL, 65536 - 24, 61);
  CHECK_ERR(raw_call(&c, big, n, 61), ACCEL_EPROTO);
  td_client_close(&c);
  /* A read larger than a frame can carry: ELIMIT before anything is allocated. */
  td_client_open(&c, d.url);
  CHECK_OK(td_hello(&c, NULL));
  CHECK_OK(td_create(&c, td_handle(1, 1), ACCEL_U32, 1 << 20));
  static uint32_t data[1 << 20];
  CHECK_ERR(td_read_u32(&c, td_handle(1, 1), data, 1 << 20), ACCEL_ELIMIT);
  CHECK_ERR(td_write_u32(&c, td_handle(1, 1), data, 16), 0);
  td_client_close(&c);
  finish(&d);
}

/* With PROTO_CAP_BATCH a message may hold several frames: each is answered; bytes after the
 * last whole frame count as one bad frame (no answer: not a frame of ours). */
TEST(batched_requests_with_a_broken_tail) {
  td_daemon d;
  start(&d);
  td_client c;
  td_client_open(&c, d.url);
  proto_welcome w;
  CHECK_OK(td_hello_caps(&c, PROTO_CAP_BATCH, &w));
  CHECK_EQ(w.capabilities, PROTO_CAP_BATCH);
  proto_out o;
  proto_control_req ping = {PROTO_CTL_PING, 0};
  proto_out_init(&o);
  for (uint64_t id = 1; id <= 3; id++)
    CHECK_OK(proto_encode_control(&o, id, &ping));
  uint8_t tail[7] = {'A', 'C', 'C', '1'};
  td_send_raw(&c, o.data, o.len, 1);
  td_send_raw(&c, tail, sizeof tail, 2);
  proto_out_free(&o);
  int answered = 0;
  for (nng_msg *m; answered < 3 && td_recv(&c, &m, TD_FOREVER) == 0; nng_msg_free(m)) {
    const uint8_t *p = nng_msg_body(m);
    size_t len = nng_msg_len(m);
    for (size_t n; (n = proto_next_frame(p, len)) > 0; p += n, len -= n, answered++) {
      proto_header h;
      CHECK_OK(proto_decode_header(p, n, UINT32_MAX, &h));
      CHECK_EQ(h.request_id, (uint64_t)answered + 1);
    }
    CHECK_EQ(len, 0);
  }
  CHECK_EQ(answered, 3);
  td_client_close(&c);
  finish(&d);
}

TEST(frames_in_the_wrong_order) {
  td_daemon d;
  start(&d);
  td_client c;
  td_client_open(&c, d.url);
  CHECK_ERR(td_fill(&c, td_handle(1, 1), 0), ACCEL_EPROTO); /* an op before HELLO */
  proto_out o;
  proto_out_init(&o);
  proto_hello h = {.version = PROTO_VERSION + 1, .name = "from the future"};
  CHECK_OK(proto_encode_hello(&o, 70, &h));
  CHECK_ERR(td_call(&c, &o, 70), ACCEL_EPROTO); /* another protocol version: told, then cut */
  td_client_close(&c);
  td_client_open(&c, d.url);
  uint8_t buf[64];
  size_t n = frame(buf, PROTO_MAGIC, PROTO_VERSION + 1, PROTO_CONTROL, 16, 71);
  CHECK_ERR(raw_call(&c, buf, n, 71), ACCEL_EPROTO);
  td_client_close(&c);
  finish(&d);
}

/* ---- another protocol version ---- */

/* What the daemon logs as the reason (then ": refused", or how the transport ends it). */
#define VERSION_REASON "another protocol version"

static int occurrences(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
    n++;
  return n;
}

/* A HELLO of this version, encoded (the header always says PROTO_VERSION). */
static size_t good_hello(uint8_t *buf, size_t cap, uint64_t id) {
  proto_out o;
  proto_hello h = {.version = PROTO_VERSION, .name = "daemon-test"};
  proto_out_init(&o);
  CHECK_OK(proto_encode_hello(&o, id, &h));
  CHECK_LE(o.len, cap);
  memcpy(buf, o.data, o.len);
  size_t n = o.len;
  proto_out_free(&o);
  return n;
}

/* `hello` (a HELLO that differs from a good one in its version only) is the first frame of a
 * fresh connection, so "no HELLO yet" cannot be why it fails: it gets ACCEL_EPROTO with its
 * own request id, the daemon logs the version as the reason, and the connection is refused
 * from then on (a good HELLO on it gets no answer), while a fresh connection is served. */
static void refused_for_its_version(td_daemon *d, const uint8_t *hello, size_t n, uint64_t id) {
  int before = occurrences(td_log(d), VERSION_REASON);
  td_client c;
  td_client_open(&c, d->url);
  CHECK_ERR(raw_call(&c, hello, n, id), ACCEL_EPROTO);
  /* The daemon logs before it replies; the log file may lag a little behind. */
  TEST_WAIT_FOR(occurrences(td_log(d), VERSION_REASON) > before, 20);
  uint8_t buf[128];
  td_send_raw(&c, buf, good_hello(buf, sizeof buf, id + 1), id + 1);
  nng_msg *m;
  int rv = td_recv(&c, &m, 300); /* no WELCOME: silence (refused), or a closed connection */
  CHECK(rv == NNG_ETIMEDOUT || rv == NNG_ECLOSED);
  td_client_close(&c);
  td_client_open(&c, d->url);
  proto_welcome w;
  CHECK_OK(td_hello(&c, &w));
  CHECK_EQ(w.version, PROTO_VERSION);
  td_client_close(&c);
}

/* The version in the HELLO's body (u16 at the body's start) and in the frame's header. */
TEST(wrong_version_hello_is_refused_for_its_version) {
  td_daemon d;
  start(&d);
  uint8_t buf[128];
  size_t n = good_hello(buf, sizeof buf, 70);
  buf[PROTO_HEADER_SIZE] = (uint8_t)(PROTO_VERSION + 1);
  refused_for_its_version(&d, buf, n, 70);
  n = good_hello(buf, sizeof buf, 72);
  buf[4] = (uint8_t)(PROTO_VERSION + 1);
  refused_for_its_version(&d, buf, n, 72);
  n = frame(buf, PROTO_MAGIC, PROTO_VERSION + 1, PROTO_CONTROL, 16, 74); /* not a HELLO */
  refused_for_its_version(&d, buf, n, 74);
  finish(&d);
}

/* ---- the fuzz corpus and mutations of it ---- */

static size_t load(const char *path, uint8_t *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint32_t next_random(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)rng_state;
}

/* Sends a frame and swallows whatever comes back (or nothing). On the local stream a frame
 * that is not ours ends the connection, so each goes on a connection of its own (the daemon
 * may close it before everything is written: that is fine). */
static void fire(td_client *c, const char *url, const uint8_t *buf, size_t len) {
  if (c->fd < 0) {
    td_send_raw(c, buf, len, 1);
    return;
  }
  td_client one;
  td_client_open(&one, url);
  if (proto_local_send(one.fd, buf, len, -1) != 0) {
    /* the daemon may cut the connection before all of the garbage is in: that is allowed */
  }
  td_client_close(&one);
}

/* Each frame fired comes on a connection of its own: a burst of a thousand would all wait in
 * the listen backlog and be accepted at once, past max_connections (1024), before the daemon
 * read the first one's end. So each file's frames wait for the last file's connections to
 * be gone (ours and accelctl's own remain). */
static void settle(td_daemon *d) {
  TEST_WAIT_FOR(td_status_field(d, "connections") <= 2, 10);
}

TEST(fuzz_corpus_and_mutations) {
  const char *dir = getenv("ACCEL_FUZZ_CORPUS");
  CHECK(dir != NULL);
  td_daemon d;
  start(&d);
  td_client c;
  td_client_open(&c, d.url);
  DIR *dp = opendir(dir);
  CHECK(dp != NULL);
  int files = 0;
  long rounds = test_scaled(20, 2);
  for (struct dirent *e; (e = readdir(dp)) != NULL;) {
    if (e->d_name[0] == '.')
      continue;
    char path[512];
    uint8_t buf[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t n = load(path, buf, sizeof buf);
    settle(&d);
    fire(&c, d.url, buf, n);
    for (long r = 0; r < rounds && n > 0; r++) {
      uint8_t mut[4096];
      memcpy(mut, buf, n);
      for (int k = 0; k < 1 + (int)(next_random() % 4); k++)
        mut[next_random() % n] ^= (uint8_t)(1u << (next_random() % 8));
      fire(&c, d.url, mut, n - (next_random() % 3 == 0 ? next_random() % n : 0));
    }
    files++;
  }
  closedir(dp);
  CHECK_GT(files, 5);
  td_client_close(&c);
  finish(&d);
}

static const test_case tests[] = {
    TEST_CASE(nngcat_garbage),
    TEST_CASE(short_and_foreign_frames_are_refused),
    TEST_CASE(bad_headers_get_eproto_with_the_request_id),
    TEST_CASE(half_written_frames_wait_then_close),
    TEST_CASE(truncated_and_corrupted_ops_get_eproto),
    TEST_CASE(oversized_frames_are_refused),
    TEST_CASE(batched_requests_with_a_broken_tail),
    TEST_CASE(frames_in_the_wrong_order),
    TEST_CASE(wrong_version_hello_is_refused_for_its_version),
    TEST_CASE(fuzz_corpus_and_mutations),
};

TEST_MAIN(tests)
