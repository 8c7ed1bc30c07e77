/* `accelctl clients`: one record per client session (PROTO_CTL_CLIENTS), built on the loop
 * from the connections' own fields and their sessions' counters. */
#include <stdlib.h>

#include "actors/sbuf.h"
#include "server/server_priv.h"

static const char *transport(const srv_conn *c) {
  return (c->pipe & SRV_LOCAL_ID_BIT) ? "local" : "nng";
}

static void json_client(sbuf *b, const srv_server *s, const srv_conn *c) {
  const dev_session_acct *a = c->sargs.acct;
  sb_printf(b, "{\"id\":%u,\"transport\":\"%s\",\"pid\":%d,\"uid\":%lld,\"name\":", c->pipe,
            transport(c), c->peer_pid, c->peer_uid == UINT32_MAX ? -1LL : (long long)c->peer_uid);
  sb_json_str(b, c->name);
  sb_printf(b, ",\"connected_ms\":%llu,\"buffers\":%u,\"memory\":%llu,\"ops_in_flight\":%u}",
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

char *srv_clients_report(srv_server *s, bool json) {
  sbuf b = {0};
  const char *sep = "";
  if (json)
    sb_printf(&b, "[");
  else
    sb_printf(&b, "%-10s %-5s %7s %6s  %-20s %8s %10s %8s %9s\n", "ID", "VIA", "PID", "UID", "NAME",
              "BUFFERS", "MEMORY", "IN-FLIGHT", "CONNECTED");
  for (uint32_t i = 0; i < s->nbuckets; i++)
    for (const srv_conn *c = s->buckets[i]; c; c = c->hnext) {
      if (!c->session_live || c->dead)
        continue;
      if (json) {
        sb_printf(&b, "%s", sep);
        json_client(&b, s, c);
        sep = ",";
      } else {
        text_client(&b, s, c);
      }
    }
  if (json)
    sb_printf(&b, "]");
  return sb_finish(&b);
}
