/* The transports' tables (server_transport.h). nng's entries are here; the local socket's are
 * server_local.c's srv_local_* (the socket's state is private there). */
#include "server/server_transport.h"

/* A message counts until acknowledged when the client acknowledges (PROTO_CAP_ACK), else it
 * leaves our books as nng takes it (nng holds at most 64 per pipe, server_out.c). */
static void nng_send_one(srv_server *s, srv_conn *c, nng_msg *m) {
  if (c->caps & PROTO_CAP_ACK)
    c->unacked_len[c->sent % PROTO_ACK_WINDOW] = (uint32_t)nng_msg_len(m);
  else
    c->out_bytes -= nng_msg_len(m);
  c->sent++;
  srv_send(s, m);
}

/* An nng pipe cannot be paused alone: its ops past the budget are refused instead
 * (server_ops.c), and so is the pipe past twice the budget in replies (server_out.c). */
static void nng_flow(srv_server *s, srv_conn *c) {
}

/* nng's pipes close with its socket (srv_io_close): nothing per connection. */
static void nng_close_conn(srv_server *s, srv_conn *c) {
}

const srv_transport srv_transport_nng = {
    .name = "nng",
    .local = false,
    .pausable = false,
    .ack_window = true,
    .send = nng_send_one,
    .flow = nng_flow,
    .take_fd = NULL, /* nng cannot pass descriptors */
    .stream = NULL,  /* nng's pipes are written by nng's threads */
    .close = nng_close_conn,
};

const srv_transport srv_transport_local = {
    .name = "local",
    .local = true,
    .pausable = true,
    .ack_window = false,
    .send = srv_local_send,
    .flow = srv_local_flow,
    .take_fd = srv_local_take_fd,
    .use_rings = srv_local_use_rings,
    .stream = srv_local_stream,
    .close = srv_local_close,
};

const srv_transport srv_transport_tcp = {
    .name = "tcp",
    .local = false,
    .pausable = true,
    .ack_window = false,
    .send = srv_local_send,
    .flow = srv_local_flow,
    .take_fd = NULL, /* no descriptors cross TCP: no shared memory either */
    .stream = srv_local_stream,
    .close = srv_local_close,
};
