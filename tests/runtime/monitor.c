/* Monitors (accel_monitor): an actor watches another that is not its child and gets one DOWN
 * when that incarnation ends, with the reason (a failure that restarts it, a stop) and the
 * ended actor as sender; after accel_demonitor none comes; a target gone already is
 * ACCEL_ESTALE; a DOWN that meets a full mailbox comes once there is room, still with its
 * sender. Links (accel_link): a failure of one takes the other along with the same reason; a
 * stop takes nothing along; after accel_unlink a failure stays alone; linking self or a gone
 * actor is refused. */
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

enum {
  MSG_WATCH = MSG_FIRST_LOCAL,
  MSG_UNWATCH,
  MSG_FAIL,
  MSG_CHECK,
  MSG_FILL,
  MSG_LINK,
  MSG_UNLINK
};

typedef struct watcher {
  accel_ref target;
  uint64_t id;
} watcher;

static gate got;      /* one signal per thing the watcher logged */
static accel_ref who; /* the target the watcher was told to watch */

static int watcher_receive(accel_actor *self, void *state, accel_msg *msg) {
  watcher *w = state;
  switch (msg->type) {
  case MSG_WATCH:
    w->target = who;
    events_add("watch:%s", accel_err_name(accel_monitor(self, w->target, &w->id)));
    break;
  case MSG_UNWATCH:
    events_add("unwatch:%s", accel_err_name(accel_demonitor(self, w->target, w->id)));
    events_add("again:%s", accel_err_name(accel_demonitor(self, w->target, w->id)));
    break;
  case ACCEL_MSG_DOWN:
    events_add("down:%s:%s:%s", accel_err_name(accel_down_reason(msg)),
               ref_eq(msg->sender, w->target) ? "sender" : "other",
               msg->arg == w->id ? "id" : "bad-id");
    break;
  case MSG_CHECK:
    events_add("check");
    break;
  default: /* MSG_FILL: only takes room */
    return 0;
  }
  gate_signal(&got);
  return 0;
}

static int target_receive(accel_actor *self, void *state, accel_msg *msg) {
  return msg->type == MSG_FAIL ? ACCEL_EIO : 0;
}

static const accel_behavior watcher_b = {
    .name = "watcher", .state_size = sizeof(watcher), .receive = watcher_receive};
static const accel_behavior target_b = {.name = "target", .receive = target_receive};

/* The watcher and its target, siblings under the root; the watcher watching. */
static accel_runtime *scene(accel_ref *w, accel_ref *t, uint32_t watcher_mailbox) {
  events_reset();
  gate_init(&got);
  accel_runtime *rt = runtime_started();
  accel_spawn_opts wo = {.mailbox_capacity = watcher_mailbox};
  *w = spawn_ok(rt, NULL, &watcher_b, NULL, &wo);
  *t = who = spawn_ok(rt, NULL, &target_b, NULL, NULL);
  CHECK_OK(tell_arg(rt, *w, MSG_WATCH, 0));
  CHECK_OK(gate_wait(&got, 1, 5000));
  CHECK_STR_EQ(events_get(), "watch:OK");
  return rt;
}

static void scene_end(accel_runtime *rt) {
  runtime_stop_then_destroy(rt, NULL);
  gate_destroy(&got);
}

/* The target is stale once its incarnation has ended (and fired its monitors). */
static void wait_stale(accel_runtime *rt, accel_ref t) {
  for (int i = 0; i < 5000 && accel_tell(rt, t, &(accel_msg){.type = MSG_CHECK}) == 0; i++)
    test_sleep_ms(1);
  CHECK_ERR(accel_tell(rt, t, &(accel_msg){.type = MSG_CHECK}), ACCEL_ESTALE);
}

TEST(a_failure_sends_down_with_its_reason_and_sender) {
  accel_ref w, t;
  accel_runtime *rt = scene(&w, &t, 0);
  CHECK_OK(tell_arg(rt, t, MSG_FAIL, 0)); /* the root restarts it: a new incarnation */
  CHECK_OK(gate_wait(&got, 2, 5000));
  CHECK_STR_EQ(events_get(), "watch:OK down:EIO:sender:id");
  scene_end(rt);
}

TEST(a_stop_sends_down_with_reason_0) {
  accel_ref w, t;
  accel_runtime *rt = scene(&w, &t, 0);
  CHECK_OK(accel_stop(rt, t));
  CHECK_OK(gate_wait(&got, 2, 5000));
  CHECK_STR_EQ(events_get(), "watch:OK down:OK:sender:id");
  scene_end(rt);
}

TEST(after_demonitor_no_down_comes) {
  accel_ref w, t;
  accel_runtime *rt = scene(&w, &t, 0);
  CHECK_OK(tell_arg(rt, w, MSG_UNWATCH, 0));
  CHECK_OK(gate_wait(&got, 2, 5000));
  CHECK_OK(accel_stop(rt, t));
  wait_stale(rt, t);
  CHECK_OK(tell_arg(rt, w, MSG_CHECK, 0)); /* behind any DOWN the end would have sent */
  CHECK_OK(gate_wait(&got, 3, 5000));
  CHECK_STR_EQ(events_get(), "watch:OK unwatch:OK again:ENOENT check");
  scene_end(rt);
}

TEST(watching_an_actor_gone_is_estale) {
  accel_ref w, t;
  accel_runtime *rt = scene(&w, &t, 0);
  CHECK_OK(gate_wait(&got, 1, 5000));
  CHECK_OK(accel_stop(rt, t));
  CHECK_OK(gate_wait(&got, 2, 5000));      /* the first monitor's DOWN */
  CHECK_OK(tell_arg(rt, w, MSG_WATCH, 0)); /* `who` is still the ended target */
  CHECK_OK(gate_wait(&got, 3, 5000));
  CHECK_STR_EQ(events_get(), "watch:OK down:OK:sender:id watch:ESTALE");
  scene_end(rt);
}

/* A driver fills the watcher's mailbox (capacity 2) and stops the target in one receive; with
 * no in-turn hops (set for this runtime) the watcher cannot drain before the DOWN is sent. */
typedef struct filler {
  accel_ref w, t;
} filler;

static int filler_receive(accel_actor *self, void *state, accel_msg *msg) {
  filler *f = msg->data;
  accel_runtime *rt = accel_actor_runtime(self);
  CHECK_OK(accel_tell(rt, f->w, &(accel_msg){.type = MSG_FILL}));
  CHECK_OK(accel_tell(rt, f->w, &(accel_msg){.type = MSG_FILL}));
  CHECK_ERR(accel_tell(rt, f->w, &(accel_msg){.type = MSG_FILL}), ACCEL_EBUSY); /* full */
  CHECK_OK(accel_stop(rt, f->t));
  return 0;
}

static const accel_behavior filler_b = {.name = "filler", .receive = filler_receive};

TEST(a_down_that_meets_a_full_mailbox_comes_later) {
  setenv("ACCEL_TURN_HOPS", "0", 1);
  accel_ref w, t;
  accel_runtime *rt = scene(&w, &t, 2);
  unsetenv("ACCEL_TURN_HOPS");
  static filler f;
  f = (filler){w, t};
  accel_ref d = spawn_ok(rt, NULL, &filler_b, NULL, NULL);
  CHECK_OK(accel_tell(rt, d, &(accel_msg){.type = MSG_KICK, .data = &f}));
  CHECK_OK(gate_wait(&got, 2, 5000));
  CHECK_STR_EQ(events_get(), "watch:OK down:OK:sender:id");
  CHECK_EQ(stats_of(rt).dead_letters, 0);
  scene_end(rt);
}

/* ---- links ---- */

static accel_ref link_to; /* whom the linker links to */

static int linker_receive(accel_actor *self, void *state, accel_msg *msg) {
  switch (msg->type) {
  case MSG_LINK:
    events_add("link:%s", accel_err_name(accel_link(self, link_to)));
    events_add("self:%s", accel_err_name(accel_link(self, accel_self(self))));
    break;
  case MSG_UNLINK:
    events_add("unlink:%s", accel_err_name(accel_unlink(self, link_to)));
    events_add("again:%s", accel_err_name(accel_unlink(self, link_to)));
    break;
  case MSG_CHECK:
    events_add("alive");
    break;
  default:
    return 0;
  }
  gate_signal(&got);
  return 0;
}

static const accel_behavior linker_b = {.name = "linker", .receive = linker_receive};

/* The watcher watches the linker, which is linked to the target: all three siblings. */
static accel_runtime *link_scene(accel_ref *w, accel_ref *l, accel_ref *t) {
  events_reset();
  gate_init(&got);
  accel_runtime *rt = runtime_started();
  *w = spawn_ok(rt, NULL, &watcher_b, NULL, NULL);
  *l = who = spawn_ok(rt, NULL, &linker_b, NULL, NULL);
  *t = link_to = spawn_ok(rt, NULL, &target_b, NULL, NULL);
  CHECK_OK(tell_arg(rt, *w, MSG_WATCH, 0));
  CHECK_OK(tell_arg(rt, *l, MSG_LINK, 0));
  CHECK_OK(gate_wait(&got, 2, 5000));
  return rt;
}

TEST(a_linked_failure_takes_the_partner_along) {
  accel_ref w, l, t;
  accel_runtime *rt = link_scene(&w, &l, &t);
  CHECK_OK(tell_arg(rt, t, MSG_FAIL, 0)); /* the target fails with EIO */
  CHECK_OK(gate_wait(&got, 3, 5000));
  CHECK_STR_EQ(events_get(), "watch:OK link:OK self:EINVAL down:EIO:sender:id");
  scene_end(rt);
}

TEST(a_stop_takes_nothing_along) {
  accel_ref w, l, t;
  accel_runtime *rt = link_scene(&w, &l, &t);
  CHECK_OK(accel_stop(rt, t));
  wait_stale(rt, t);
  CHECK_OK(tell_arg(rt, l, MSG_CHECK, 0)); /* behind any EXIT the stop would have sent */
  CHECK_OK(gate_wait(&got, 3, 5000));
  CHECK_OK(tell_arg(rt, w, MSG_CHECK, 0));
  CHECK_OK(gate_wait(&got, 4, 5000));
  CHECK_STR_EQ(events_get(), "watch:OK link:OK self:EINVAL alive check");
  scene_end(rt);
}

TEST(after_unlink_a_failure_stays_alone) {
  accel_ref w, l, t;
  accel_runtime *rt = link_scene(&w, &l, &t);
  CHECK_OK(tell_arg(rt, l, MSG_UNLINK, 0));
  CHECK_OK(gate_wait(&got, 3, 5000));
  CHECK_OK(tell_arg(rt, t, MSG_FAIL, 0));
  wait_stale(rt, t); /* restarted: the failed incarnation's ref is stale */
  CHECK_OK(tell_arg(rt, l, MSG_CHECK, 0));
  CHECK_OK(gate_wait(&got, 4, 5000));
  CHECK_OK(tell_arg(rt, w, MSG_CHECK, 0));
  CHECK_OK(gate_wait(&got, 5, 5000));
  CHECK_STR_EQ(events_get(), "watch:OK link:OK self:EINVAL unlink:OK again:ENOENT alive check");
  scene_end(rt);
}

TEST(linking_an_actor_gone_is_estale) {
  accel_ref w, l, t;
  accel_runtime *rt = link_scene(&w, &l, &t);
  CHECK_OK(accel_stop(rt, t));
  wait_stale(rt, t);
  CHECK_OK(tell_arg(rt, l, MSG_LINK, 0)); /* link_to is the ended target */
  CHECK_OK(gate_wait(&got, 3, 5000));
  CHECK_STR_EQ(events_get(), "watch:OK link:OK self:EINVAL link:ESTALE self:EINVAL");
  scene_end(rt);
}

static const test_case tests[] = {
    TEST_CASE(a_failure_sends_down_with_its_reason_and_sender),
    TEST_CASE(a_stop_sends_down_with_reason_0),
    TEST_CASE(after_demonitor_no_down_comes),
    TEST_CASE(watching_an_actor_gone_is_estale),
    TEST_CASE(a_down_that_meets_a_full_mailbox_comes_later),
    TEST_CASE(a_linked_failure_takes_the_partner_along),
    TEST_CASE(a_stop_takes_nothing_along),
    TEST_CASE(after_unlink_a_failure_stays_alone),
    TEST_CASE(linking_an_actor_gone_is_estale),
};

TEST_MAIN(tests)
