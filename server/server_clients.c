/* `accelctl clients`: one record per client session (PROTO_CTL_CLIENTS), built on the loop
 * from the connections' own fields and their sessions' counters. */
#include <stdlib.h>
#include <string.h>

#include "runtime/alloc.h"
#include "server/sbuf.h"
#include "server/server_priv.h"
#include "server/server_shards.h"
#include "server/server_transport.h"

static const char *transport(const srv_conn *c) {
  return c->tp->name;
}

static void json_client(sbuf *b, const srv_server *s, const srv_conn *c) {
  const dev_session_acct *a = c->sargs.acct;
  sb_printf(b, "{\"id\":%u,\"transport\":\"%s\",\"pid\":%d,\"uid\":%lld,\"name\":", c->pipe,
            transport(c), c->peer_pid, c->peer_uid == UINT32_MAX ? -1LL : (long long)c->peer_uid);
  sb_json_str(b, c->name);
  sb_printf(
      b, ",\"rings\":%s,\"connected_ms\":%llu,\"buffers\":%u,\"memory\":%llu,\"ops_in_flight\":%u}",
      c->rings ? "true" : "false",
      (unsigned long long)(srv_now_ms((srv_server *)s) - c->connected_ms), a ? a->buffers : 0,
      (unsigned long long)(a ? a->memory : 0), a ? a->in_flight : 0);
}

static void text_client(sbuf *b, const srv_server *s, const srv_conn *c) {
  const dev_session_acct *a = c->sargs.acct;
  char mem[32];
  sb_human_bytes(a ? a->memory : 0, mem, sizeof mem);
  sb_printf(b, "%-10u %-5s %7d %6lld  %-20.20s %8u %10s %8u %8llus\n", c->pipe, transport(c),
            c->peer_pid, c->peer_uid == UINT32_MAX ? -1LL : (long long)c->peer_uid, c->name,
            a ? a->buffers : 0, mem, a ? a->in_flight : 0,
            (unsigned long long)((srv_now_ms((srv_server *)s) - c->connected_ms) / 1000));
}

/* Every shard's server (the others are parked while this one reads them), i from 0. */
static const srv_server *shard_at(srv_server *s, uint32_t i) {
  return i < s->shards->n ? s->shards->servers[i] : NULL;
}

static void report_shard(sbuf *b, const srv_server *s, bool json, const char **sep) {
  for (uint32_t i = 0; i < s->nbuckets; i++)
    for (const srv_conn *c = s->buckets[i]; c; c = c->hnext) {
      if (!c->session_live || c->dead)
        continue;
      if (json) {
        sb_printf(b, "%s", *sep);
        json_client(b, s, c);
        *sep = ",";
      } else {
        text_client(b, s, c);
      }
    }
}

char *srv_clients_report(srv_server *s, bool json) {
  sbuf b = {0};
  const char *sep = "";
  if (json)
    sb_printf(&b, "[");
  else
    sb_printf(&b, "%-10s %-5s %7s %6s  %-20s %8s %10s %8s %9s\n", "ID", "VIA", "PID", "UID", "NAME",
              "BUFFERS", "MEMORY", "IN-FLIGHT", "CONNECTED");
  for (uint32_t k = 0; k < s->shards->n; k++)
    if (shard_at(s, k) != NULL)
      report_shard(&b, shard_at(s, k), json, &sep);
  if (json)
    sb_printf(&b, "]");
  return sb_finish(&b);
}

/* ---- per-client series for /metrics ----
 * Gauges summed over the sessions of each client name (a program's name, or the name its URL
 * gives), for the SRV_METRICS_CLIENTS names with the most sessions (ties: by name); the
 * sessions of the other names are summed under client="other", so that clients choosing new
 * names cannot make a scrape, or the series a Prometheus keeps, grow without bound. */

typedef struct client_sum {
  const char *name;
  uint64_t sessions, buffers, memory, in_flight;
} client_sum;

static client_sum *sum_for(client_sum *sums, size_t *n, const char *name) {
  for (size_t i = 0; i < *n; i++)
    if (strcmp(sums[i].name, name) == 0)
      return &sums[i];
  sums[*n] = (client_sum){.name = name};
  return &sums[(*n)++];
}

static int most_sessions_first(const void *a, const void *b) {
  const client_sum *x = a, *y = b;
  if (x->sessions != y->sessions)
    return x->sessions > y->sessions ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* One shard's sessions' sums by name into sums (room for one per connection), n of them so
 * far; their count. */
static size_t sum_sessions(const srv_server *s, client_sum *sums, size_t n) {
  for (uint32_t i = 0; i < s->nbuckets; i++)
    for (const srv_conn *c = s->buckets[i]; c; c = c->hnext) {
      if (!c->session_live || c->dead)
        continue;
      const dev_session_acct *a = c->sargs.acct;
      client_sum *sum = sum_for(sums, &n, c->name[0] ? c->name : "?");
      sum->sessions++;
      sum->buffers += a ? a->buffers : 0;
      sum->memory += a ? a->memory : 0;
      sum->in_flight += a ? a->in_flight : 0;
    }
  return n;
}

/* Keeps the first SRV_METRICS_CLIENTS of the sorted sums, the rest folded into "other". */
static size_t fold_others(client_sum *sums, size_t n) {
  qsort(sums, n, sizeof *sums, most_sessions_first);
  if (n <= SRV_METRICS_CLIENTS)
    return n;
  client_sum other = {.name = "other"};
  for (size_t i = SRV_METRICS_CLIENTS; i < n; i++) {
    other.sessions += sums[i].sessions;
    other.buffers += sums[i].buffers;
    other.memory += sums[i].memory;
    other.in_flight += sums[i].in_flight;
  }
  sums[SRV_METRICS_CLIENTS] = other;
  return SRV_METRICS_CLIENTS + 1;
}

typedef enum client_field { SESSIONS, BUFFERS, MEMORY, IN_FLIGHT } client_field;

static uint64_t field_of(const client_sum *c, client_field f) {
  return f == SESSIONS  ? c->sessions
         : f == BUFFERS ? c->buffers
         : f == MEMORY  ? c->memory
                        : c->in_flight;
}

static void client_family(sbuf *b, const char *metric, const char *help, const client_sum *sums,
                          size_t n, client_field field) {
  sb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", metric, help, metric);
  for (size_t i = 0; i < n; i++) {
    sb_printf(b, "%s{client=\"", metric);
    sb_label_value(b, sums[i].name);
    sb_printf(b, "\"} %llu\n", (unsigned long long)field_of(&sums[i], field));
  }
}

char *srv_clients_metrics(srv_server *s) {
  size_t conns = 0, n = 0;
  for (uint32_t k = 0; k < s->shards->n; k++)
    conns += shard_at(s, k) ? shard_at(s, k)->nconns : 0;
  client_sum *sums = rt_calloc(conns + 1, sizeof *sums);
  if (sums == NULL)
    return NULL;
  for (uint32_t k = 0; k < s->shards->n; k++)
    if (shard_at(s, k) != NULL)
      n = sum_sessions(shard_at(s, k), sums, n);
  n = fold_others(sums, n);
  sbuf b = {0};
  client_family(&b, "accel_client_sessions", "Sessions of each client name.", sums, n, SESSIONS);
  client_family(&b, "accel_client_buffers", "Live buffers of each client name's sessions.", sums, n,
                BUFFERS);
  client_family(&b, "accel_client_memory_bytes", "Bytes of buffers of each client name.", sums, n,
                MEMORY);
  client_family(&b, "accel_client_ops_in_flight", "Ops in flight of each client name.", sums, n,
                IN_FLIGHT);
  rt_free(sums);
  return sb_finish(&b);
}
