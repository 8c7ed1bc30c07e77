/* Links attached to a running worker (serve.h, wire.h): acceld's second and later worlds
 * reach the devices through links of their own, each served by a thread of its own, so that
 * their calls are read and submitted side by side. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/worker/serve.h"

static void *link_thread(void *arg) {
  pthread_setname_np(pthread_self(), "accel-dev-link"); /* seen in top -H, gdb, perf */
  ws_serve(arg);
  return NULL;
}

/* The new link's state over `cmd` and the channels its first frame brings; 0 once its thread
 * runs. */
static int attach(int cmd) {
  static uint32_t attached; /* only the first link's thread attaches */
  int ch[4];                /* note, ack, staging region, rings */
  if (cmd < 0)
    return ACCEL_EPROTO;
  if (!bw_recv_fds(cmd, BW_CHANNELS, ch, 4)) { /* acceld wrote it before BW_ATTACH */
    close(cmd);
    return ACCEL_EPROTO;
  }
  ws_state *l = ws_link_new(&ws);
  int rc = l == NULL ? ACCEL_ENOMEM : ws_map_stage(l, ch[2]) ? 0 : ACCEL_ESYS;
  close(ch[2]); /* the mapping keeps the region */
  if (rc == 0 && !ws_use_rings(l, ch[3]))
    rc = ACCEL_EPROTO; /* the link keeps the rings' descriptor */
  else if (rc != 0)
    close(ch[3]);
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  if (rc == 0) {
    l->index = ++attached;
    l->cmd.fd = cmd;
    l->note.fd = ch[0];
    l->ack = ch[1];
    rc = pthread_create(&t, &a, link_thread, l) == 0 ? 0 : ACCEL_ESYS;
  }
  pthread_attr_destroy(&a);
  if (rc != 0) {
    if (l != NULL && l->stage != NULL)
      munmap(l->stage, l->stage_bytes);
    if (l != NULL)
      bw_rings_unmap(&l->rings);
    free(l);
    close(cmd);
    close(ch[0]);
    close(ch[1]);
  }
  return rc;
}

void ws_attach(const bw_hdr *h, int fd) {
  int rc = attach(fd);
  if (rc != 0)
    fprintf(stderr, "accel-device: a link was not attached: %s\n", accel_err_name(rc));
  ws_reply(h->tag, rc, NULL, 0, NULL, 0);
}
