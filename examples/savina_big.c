/* savina_big — Savina's "big" benchmark as an accel actor program you can copy.
 *
 * A table actor seats W players (its children) and watches each with a monitor. Asked to play,
 * it tells every player to start; a player pings a random player, waits for the pong, and
 * pings again, P times, answering every ping it gets meanwhile. Each player tells the table
 * when its P pongs are in; once all have, the table stops them and waits for their W DOWN
 * messages (the monitors), then answers the ask with what it counted. main() asks from its own
 * thread, with a deadline, and checks the counts: W * P pongs, W players ended cleanly.
 *
 * It shows: spawning children with an argument, replying to msg->sender, asks with a timeout
 * answered later (accel_msg_take_reply), monitors and their DOWN reasons, and stopping actors.
 *
 * Build: meson compile -C build savina_big; run: build/examples/savina_big [W [P]] */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "accel/runtime.h"

enum {
  MSG_PLAY = ACCEL_MSG_USER, /* table, asked from main: play a round; replies a tally */
  MSG_START,                 /* player: start pinging */
  MSG_PING,                  /* player: answer with a pong to the sender */
  MSG_PONG,                  /* player: a ping of ours was answered */
  MSG_DONE                   /* table: a player has all its pongs (arg: how many) */
};

typedef struct tally {
  uint64_t pongs;   /* pongs the players counted */
  uint32_t ended;   /* players whose DOWN came with reason 0 (a clean stop) */
  uint32_t refused; /* players whose DOWN came with another reason */
} tally;

typedef struct table {
  uint32_t players, pings;
  accel_ref *seat;     /* the players' refs */
  uint32_t done;       /* players with all their pongs */
  tally t;             /* the answer, as it grows */
  accel_future *asker; /* main's ask, answered when every player has ended */
} table;

typedef struct player {
  table *table;
  accel_ref table_ref;
  uint32_t pongs;
  uint64_t seed; /* xorshift64: each player its own sequence */
} player;

/* ---- players ---- */

static int player_start(accel_actor *self, void *state, void *arg) {
  player *p = state;
  p->table = arg;
  p->seed = 0x9E3779B97F4A7C15ull ^ accel_self(self).slot;
  return 0;
}

static int ping_someone(accel_actor *self, player *p) {
  p->seed ^= p->seed << 13, p->seed ^= p->seed >> 7, p->seed ^= p->seed << 17;
  accel_ref to = p->table->seat[p->seed % p->table->players];
  return accel_tell(accel_actor_runtime(self), to, &(accel_msg){.type = MSG_PING});
}

static int player_receive(accel_actor *self, void *state, accel_msg *msg) {
  player *p = state;
  accel_runtime *rt = accel_actor_runtime(self);
  switch (msg->type) {
  case MSG_START:
    p->table_ref = msg->sender;
    return ping_someone(self, p);
  case MSG_PING: /* sent by an actor: the runtime filled in msg->sender */
    return accel_tell(rt, msg->sender, &(accel_msg){.type = MSG_PONG});
  case MSG_PONG:
    if (++p->pongs < p->table->pings)
      return ping_someone(self, p);
    return accel_tell(rt, p->table_ref, &(accel_msg){.type = MSG_DONE, .arg = p->pongs});
  default:
    return 0;
  }
}

static const accel_behavior player_behavior = {
    .name = "player",
    .state_size = sizeof(player),
    .start = player_start,
    .receive = player_receive,
};

/* ---- the table ---- */

static int table_start(accel_actor *self, void *state, void *arg) {
  table *t = arg;
  *(table **)state = t; /* the table's state is only a pointer to its setup (main's) */
  for (uint32_t i = 0; i < t->players; i++) {
    accel_spawn_opts o = {.name = "player"};
    int rc = accel_spawn(accel_actor_runtime(self), self, &player_behavior, t, &o, &t->seat[i]);
    uint64_t id;
    if (rc == 0)
      rc = accel_monitor(self, t->seat[i], &id);
    if (rc != 0)
      return rc; /* the table fails to start; main's ask then fails too */
  }
  return 0;
}

static void answer(table *t) {
  tally *copy = malloc(sizeof *copy);
  if (copy)
    *copy = t->t;
  accel_future_complete(t->asker, copy ? 0 : ACCEL_ENOMEM, copy, free);
  accel_future_release(t->asker);
  t->asker = NULL;
}

static int table_receive(accel_actor *self, void *state, accel_msg *msg) {
  table *t = *(table **)state;
  accel_runtime *rt = accel_actor_runtime(self);
  switch (msg->type) {
  case MSG_PLAY:
    t->asker = accel_msg_take_reply(msg); /* answered once every player has ended */
    for (uint32_t i = 0; i < t->players; i++)
      accel_tell(rt, t->seat[i], &(accel_msg){.type = MSG_START});
    return 0;
  case MSG_DONE:
    t->t.pongs += msg->arg;
    if (++t->done == t->players) /* no ping is unanswered now: the players may go */
      for (uint32_t i = 0; i < t->players; i++)
        accel_stop(rt, t->seat[i]);
    return 0;
  case ACCEL_MSG_DOWN:
    if (accel_down_reason(msg) == 0)
      t->t.ended++;
    else
      t->t.refused++;
    if (t->t.ended + t->t.refused == t->players && t->asker)
      answer(t);
    return 0;
  default:
    return 0;
  }
}

static const accel_behavior table_behavior = {
    .name = "table",
    .state_size = sizeof(table *),
    .start = table_start,
    .receive = table_receive,
};

/* ---- main ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  uint32_t players = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 120;
  uint32_t pings = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 2000;
  if (players < 2 || pings < 1) {
    fprintf(stderr, "usage: savina_big [PLAYERS >= 2 [PINGS >= 1]]\n");
    return 2;
  }
  table t = {.players = players, .pings = pings, .seat = calloc(players, sizeof(accel_ref))};
  accel_runtime *rt;
  int rc = t.seat ? accel_runtime_create(&rt, NULL) : ACCEL_ENOMEM;
  if (rc != 0) {
    fprintf(stderr, "savina_big: %s\n", accel_strerror(rc));
    return 1;
  }
  accel_ref table_ref;
  accel_spawn_opts o = {.name = "table"};
  rc = accel_spawn(rt, NULL, &table_behavior, &t, &o, &table_ref);
  if (rc == 0)
    rc = accel_runtime_start(rt); /* the loop runs on the runtime's own thread */
  accel_future *f = NULL;
  double t0 = now_s();
  if (rc == 0)
    rc = accel_ask_timeout(rt, table_ref, &(accel_msg){.type = MSG_PLAY}, 60000, &f);
  if (rc == 0)
    rc = accel_future_wait(f, -1); /* the deadline is the ask's own */
  double s = now_s() - t0;
  tally got = rc == 0 ? *(tally *)accel_future_value(f) : (tally){0};
  if (f)
    accel_future_release(f);
  accel_runtime_stop(rt);
  int join = accel_runtime_join(rt);
  accel_runtime_destroy(rt);
  free(t.seat);
  uint64_t want = (uint64_t)players * pings;
  printf("%u players, %u pings each: %" PRIu64 " pongs (want %" PRIu64 "), %u ended cleanly, "
         "%u otherwise, in %.3f s (%.2f M pongs/s)\n",
         players, pings, got.pongs, want, got.ended, got.refused, s, (double)got.pongs / s / 1e6);
  if (rc != 0)
    fprintf(stderr, "savina_big: the round failed: %s\n", accel_strerror(rc));
  bool ok = rc == 0 && join == 0 && got.pongs == want && got.ended == players && got.refused == 0;
  return ok ? 0 : 1;
}
