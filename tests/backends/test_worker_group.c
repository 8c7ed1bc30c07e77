/* A device worker's completions held back while its link's calls keep coming
 * (backends/worker/serve_group.c), on a link of this process whose backend is a fake that
 * counts its event records and fails on demand: a burst's completions share one event and
 * reach acceld in order, a group is cut at its limit, a completion that cannot be held sends
 * those held first, a failed event fails every completion it covers, and without events each
 * goes through a host function, only small fills and notifications pass held completions,
 * and a link that never runs out of calls holds none for longer than WS_GROUP_CALLS calls.
 * Grouping is off by default; ACCEL_WORKER_GROUP=1 (the first meson test) turns it on, and
 * without it (the second) every completion gets its own event. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "backends/worker/serve.h"

/* ---- the fake backend ---- */

static atomic_int records, host_calls, events_live;
static atomic_int record_rc, sync_rc; /* read by the completer */
static atomic_bool create_fails;

static int fake_event_create(be_device *dev, be_event **out) {
  (void)dev;
  if (create_fails)
    return ACCEL_ENOMEM;
  *out = malloc(16);
  atomic_fetch_add(&events_live, 1);
  return *out ? 0 : ACCEL_ENOMEM;
}
static void fake_event_destroy(be_event *e) {
  atomic_fetch_sub(&events_live, 1);
  free(e);
}
static int fake_event_record(be_event *e, be_queue *q) {
  (void)e, (void)q;
  atomic_fetch_add(&records, 1);
  return record_rc;
}
static int fake_event_query(be_event *e) {
  (void)e;
  return 0;
}
static int fake_event_sync(be_event *e) {
  (void)e;
  return sync_rc;
}
/* The work is done at once: the function runs now, on the caller's thread. */
static int fake_host_callback(be_queue *q, be_host_fn fn, void *arg) {
  (void)q;
  atomic_fetch_add(&host_calls, 1);
  fn(arg, 0);
  return 0;
}

static const be_ops fake = {
    .name = "fake",
    .event_create = fake_event_create,
    .event_destroy = fake_event_destroy,
    .event_record = fake_event_record,
    .event_query = fake_event_query,
    .event_sync = fake_event_sync,
    .host_callback = fake_host_callback,
    .late_callbacks = true,
};

/* ---- a link of this process: its notes come out of `peer` ---- */

static int dummy_queue, dummy_device;

typedef struct rig {
  ws_state *link;
  ws_queue *q;
  int peer;
} rig;

static void rig_open(rig *r) {
  atomic_store(&records, 0);
  atomic_store(&host_calls, 0);
  record_rc = sync_rc = 0;
  create_fails = false;
  ws_state from = {.be = &fake};
  r->link = ws_link_new(&from);
  CHECK(r->link != NULL);
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  r->link->note = bw_chan_socket(sv[0]);
  r->peer = sv[1];
  r->link->dev[0] = (be_device *)&dummy_device;
  ws_self = r->link;
  r->q = calloc(1, sizeof *r->q);
  CHECK(r->q != NULL);
  ws_queue_init(r->q);
  r->q->link = r->link;
  r->q->q = (be_queue *)&dummy_queue;
}

static void rig_close(rig *r) {
  ws_groups_flush();
  ws_queue_fini(r->q); /* its completer sends what it has and ends */
  free(r->q);
  close(r->link->note.fd);
  close(r->peer);
  pthread_mutex_destroy(&r->link->note_mu);
  pthread_mutex_destroy(&r->link->mu);
  pthread_cond_destroy(&r->link->cv);
  pthread_cond_destroy(&r->link->poll_cv);
  free(r->link);
  ws_self = NULL;
  CHECK_EQ(atomic_load(&events_live), 0);
}

/* The next n notes are completions of tags first, first + 1, ... with `status`. */
static void expect_done(rig *r, uint64_t first, int n, int status) {
  for (int i = 0; i < n; i++) {
    _Alignas(16) char buf[256];
    bw_hdr h;
    void *body;
    CHECK(bw_recv(r->peer, &h, buf, sizeof buf, &body));
    CHECK_EQ(h.type, BW_DONE);
    CHECK_EQ(h.tag, first + (uint64_t)i);
    bw_reply rep;
    memcpy(&rep, body, sizeof rep);
    CHECK_EQ(rep.status, status);
  }
}

/* No note waits for 50 ms: none was sent. */
static void expect_quiet(rig *r) {
  struct pollfd p = {.fd = r->peer, .events = POLLIN};
  CHECK_EQ(poll(&p, 1, 50), 0);
}

static bool grouping(void) {
  const char *e = getenv("ACCEL_WORKER_GROUP");
  return e != NULL && strcmp(e, "1") == 0;
}

/* ---- the cases ---- */

TEST(completions_of_a_burst_share_one_event) {
  rig r;
  rig_open(&r);
  for (int i = 0; i < 5; i++)
    ws_complete_after(r.q, 100 + (uint64_t)i, false, false);
  if (grouping()) {
    CHECK_EQ(atomic_load(&records), 0);
    expect_quiet(&r); /* held until the calls run out */
  }
  ws_groups_flush();
  CHECK_EQ(atomic_load(&records), grouping() ? 1 : 5);
  expect_done(&r, 100, 5, 0);
  rig_close(&r);
}

TEST(a_group_is_cut_at_its_limit) {
  rig r;
  rig_open(&r);
  for (int i = 0; i < WS_GROUP_MAX; i++)
    ws_complete_after(r.q, 200 + (uint64_t)i, false, false);
  CHECK_EQ(atomic_load(&records), grouping() ? 1 : WS_GROUP_MAX); /* at the limit: sent */
  expect_done(&r, 200, WS_GROUP_MAX, 0);
  ws_complete_after(r.q, 200 + WS_GROUP_MAX, false, false); /* one past it: held anew */
  CHECK_EQ(atomic_load(&records), grouping() ? 1 : WS_GROUP_MAX + 1);
  ws_groups_flush();
  CHECK_EQ(atomic_load(&records), grouping() ? 2 : WS_GROUP_MAX + 1);
  expect_done(&r, 200 + WS_GROUP_MAX, 1, 0);
  rig_close(&r);
}

TEST(a_completion_that_cannot_be_held_sends_those_held_first) {
  rig r;
  rig_open(&r);
  for (int i = 0; i < 3; i++)
    ws_complete_after(r.q, 300 + (uint64_t)i, false, false);
  be_event *e = NULL;
  CHECK_OK(fake_event_create(NULL, &e));
  ws_complete_event_after(r.q, 303, e); /* an event record's: never held */
  CHECK_EQ(atomic_load(&records), grouping() ? 2 : 4);
  expect_done(&r, 300, 4, 0);
  r.q->waited = true; /* a queue that waited for another's event: not held either */
  ws_complete_after(r.q, 304, false, false);
  CHECK_EQ(atomic_load(&records), grouping() ? 3 : 5);
  expect_done(&r, 304, 1, 0);
  fake_event_destroy(e); /* its record's completion was sent */
  rig_close(&r);
}

TEST(a_failed_event_fails_every_completion_it_covers) {
  rig r;
  rig_open(&r);
  sync_rc = ACCEL_EDEVLOST;
  for (int i = 0; i < 4; i++)
    ws_complete_after(r.q, 400 + (uint64_t)i, false, false);
  ws_groups_flush();
  expect_done(&r, 400, 4, ACCEL_EDEVLOST);
  sync_rc = 0;
  record_rc = ACCEL_EIO; /* the record itself fails: each is sent in turn with its error */
  for (int i = 0; i < 4; i++)
    ws_complete_after(r.q, 410 + (uint64_t)i, false, false);
  ws_groups_flush();
  expect_done(&r, 410, 4, ACCEL_EIO);
  rig_close(&r);
}

TEST(without_an_event_each_goes_through_a_host_function) {
  rig r;
  rig_open(&r);
  create_fails = true; /* and the queue's pool is empty */
  for (int i = 0; i < 3; i++)
    ws_complete_after(r.q, 500 + (uint64_t)i, false, false);
  ws_groups_flush();
  CHECK_EQ(atomic_load(&host_calls), 3);
  CHECK_EQ(atomic_load(&records), 0);
  expect_done(&r, 500, 3, 0);
  rig_close(&r);
}

/* Small fills and notifications pass held completions; a fill one element past the size
 * does not, nor any other call (a gemm, a copy, a queue's destruction), nor a short body. */
TEST(only_small_fills_and_notifications_pass_held_completions) {
  bw_fill f = {.esize = 4, .count = WS_GROUP_FILL_BYTES / 4};
  bw_hdr h = {.type = BW_FILL, .len = sizeof f};
  CHECK(ws_group_passes(&h, &f)); /* at the limit */
  f.count++;
  CHECK(!ws_group_passes(&h, &f)); /* one past it */
  f = (bw_fill){.esize = 0, .count = 1};
  CHECK(!ws_group_passes(&h, &f));
  f = (bw_fill){.esize = 8, .count = UINT64_MAX / 4}; /* its bytes would overflow */
  CHECK(!ws_group_passes(&h, &f));
  h.len = sizeof f - 1;
  CHECK(!ws_group_passes(&h, &f));
  bw_ids ids = {0};
  h = (bw_hdr){.type = BW_CALLBACK, .len = sizeof ids};
  CHECK(ws_group_passes(&h, &ids));
  uint32_t others[] = {BW_GEMM,      BW_LAUNCH, BW_H2D,       BW_D2H,      BW_D2D,
                       BW_Q_DESTROY, BW_Q_WAIT, BW_EV_RECORD, BW_MEM_FREE, BW_CLOSE};
  char body[512] = {0};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    h = (bw_hdr){.type = others[i], .len = sizeof body};
    CHECK(!ws_group_passes(&h, body));
  }
}

/* A link that never runs out of calls (a saturated one): a held completion goes after
 * WS_GROUP_CALLS calls, not later. */
TEST(a_held_completion_waits_behind_a_bounded_number_of_calls) {
  rig r;
  rig_open(&r);
  ws_groups_after_call(); /* nothing held: nothing counted */
  ws_complete_after(r.q, 600, false, false);
  for (int i = 0; i < WS_GROUP_CALLS - 1; i++)
    ws_groups_after_call();
  if (grouping()) {
    CHECK_EQ(atomic_load(&records), 0);
    expect_quiet(&r);
  }
  ws_groups_after_call(); /* the limit */
  CHECK_EQ(atomic_load(&records), 1);
  expect_done(&r, 600, 1, 0);
  ws_complete_after(r.q, 601, false, false); /* counted afresh */
  for (int i = 0; i < WS_GROUP_CALLS - 1; i++)
    ws_groups_after_call();
  CHECK_EQ(atomic_load(&records), grouping() ? 1 : 2);
  ws_groups_after_call();
  CHECK_EQ(atomic_load(&records), 2);
  expect_done(&r, 601, 1, 0);
  rig_close(&r);
}

static const test_case tests[] = {
    TEST_CASE(completions_of_a_burst_share_one_event),
    TEST_CASE(a_group_is_cut_at_its_limit),
    TEST_CASE(a_completion_that_cannot_be_held_sends_those_held_first),
    TEST_CASE(a_failed_event_fails_every_completion_it_covers),
    TEST_CASE(without_an_event_each_goes_through_a_host_function),
    TEST_CASE(only_small_fills_and_notifications_pass_held_completions),
    TEST_CASE(a_held_completion_waits_behind_a_bounded_number_of_calls),
};

TEST_MAIN(tests)
