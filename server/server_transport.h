/* What sets a connection's transport apart, as one table per kind (the client side has the
 * same in clients/remote.h, remote_link): the server asks the connection's table rather than
 * testing which kind of connection it has. Three kinds: nng's pipes (tls+tcp://), our own
 * stream on local Unix sockets (server_local.c) and on TCP (tcp://, server_tcp.c). A connection
 * gets its table when its record is made and keeps it to the end: a local connection whose socket
 * has closed is still local, and its entries then drop what they are given. Loop thread only. */
#ifndef SRV_SERVER_TRANSPORT_H
#define SRV_SERVER_TRANSPORT_H

#include "server/server_priv.h"

struct srv_transport {
  const char *name; /* "nng", "local" or "tcp": the clients report */
  /* Whether the peer is on this host, its credentials known (SO_PEERCRED): allow_users and
   * user_kernels = local apply to it. */
  bool local;
  /* Whether reading pauses per connection (the local socket's flow control, srv_local_flow):
   * such a connection over its budget is held back, and then neither are its requests refused
   * (EBUSY) past the budget nor is it refused past twice the budget in replies, as an nng pipe
   * is: nng cannot pause one pipe alone. */
  bool pausable;
  /* Whether the PROTO_CAP_ACK window applies (server_out.c): nng's rep0 keeps at most 64
   * messages per pipe and drops the rest, so a client that can acknowledges; a local stream
   * drops nothing, and its acks are ignored. */
  bool ack_window;
  /* Hands one message (taken) to the peer. Its bytes leave c->out_bytes when written (local),
   * or when acknowledged, or at once when nothing acknowledges (nng). */
  void (*send)(srv_server *s, srv_conn *c, nng_msg *m);
  /* The connection's requests or unwritten replies changed: reading pauses or resumes by
   * what they hold. Nothing for a transport that cannot pause (!pausable). */
  void (*flow)(srv_server *s, srv_conn *c);
  /* The next descriptor the peer passed (SCM_RIGHTS), or a negative error. NULL where
   * descriptors cannot pass: then no shared memory either (PROTO_OPF_SHM, SHM_ATTACH). */
  int (*take_fd)(srv_conn *c);
  /* Frames through the shared rings whose region the client passed (fd, not taken;
   * PROTO_CAP_RINGS): true if they are used from the WELCOME on (sent next). NULL: never. */
  bool (*use_rings)(srv_server *s, srv_conn *c, int fd);
  /* The connection's stream, whose shared ring a status reply may be put into from the thread
   * that learns an op's device work is done (srv_iost_write_early): it then leaves before the
   * loop finishes the op. NULL where there is none (nng; a closed connection). */
  struct srv_iost *(*stream)(srv_conn *c);
  /* The server stops: the connection's transport lets go of it (its record is freed by the
   * caller). */
  void (*close)(srv_server *s, srv_conn *c);
};

extern const srv_transport srv_transport_nng;
extern const srv_transport srv_transport_local;
/* tcp:// (server_tcp.c): the local transport's stream over TCP; no credentials, no
 * descriptors (and so no shared memory). */
extern const srv_transport srv_transport_tcp;

#endif
