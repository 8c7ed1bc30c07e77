/* Large transfers through a transport with a per-op size limit (ctx->max_op_bytes; acceld's
 * max_message): a WRITE or READ whose data is larger is split into chunks, sub-range ops on
 * the same buffer, streamed with at most CHUNK_WINDOW chunks of the context in flight.
 *
 * While a context has a transfer with chunks still unsent, every op it issues later (of any
 * kind, on any buffer) waits in the context's queue and is sent after the last chunk, so the
 * daemon sees them in issue order, and the daemon holds at most CHUNK_WINDOW chunks of the
 * context at once. docs/PROTOCOL.md ("Large transfers") says why this design. */
#ifndef CLIENT_CHUNK_H
#define CLIENT_CHUNK_H

#include "clients/ctx.h"
#include "runtime/attr.h"

/* The largest chunk, whatever the daemon would take: 4 chunks of it in flight cost the
 * daemon 64 MiB per context, and bound the bytes of read replies it holds for us. */
#define CHUNK_MAX_BYTES ((size_t)16 << 20)
/* Chunks of one context in flight at once (sent and not yet answered). */
#define CHUNK_WINDOW 4u

/* Sends a call's op through ctx's transport, in issue order with the context's chunked transfers,
 * splitting it if it is a WRITE or READ larger than ctx->max_op_bytes. The contract of
 * client_transport.send_op: on success the op is taken (with its future, if any, holding the
 * op's reference, and one in-flight count, settled with one client_op_done); on failure it
 * stays the caller's. Errors met later come in the op's future (and accel_finish). Any thread
 * but the transport's receive thread. */
RT_MUST_USE int chunk_send(accel_ctx *ctx, dev_call *call);

#endif
