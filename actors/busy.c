/* Busy time per device (busy.h). A device is busy while some work submitted to one of its
 * queues has not completed: the union of the queues' in-flight spans, so two queues running
 * at once count once. That is how nvidia-smi's GPU-Util is defined too (the share of a period
 * in which a kernel ran), measured from the submitting side: it includes time work waits on
 * the device behind other work, and the completion's trip back to the loop. */
#include "actors/busy.h"

#include "actors/session.h"
#include "runtime/deadline.h"

void dev_node_busy_begin(dev_node *node, uint64_t now_ns) {
  if (node->busy_running++ == 0)
    node->busy_since_ns = now_ns;
}

void dev_node_busy_end(dev_node *node, uint64_t now_ns) {
  if (node->busy_running == 0)
    return;
  if (--node->busy_running == 0 && now_ns > node->busy_since_ns)
    node->busy_ns += now_ns - node->busy_since_ns;
}

uint64_t dev_node_busy_total_ns(const dev_node *node, uint64_t now_ns) {
  uint64_t open = node->busy_running && now_ns > node->busy_since_ns ? now_ns - node->busy_since_ns
                                                                     : 0;
  return node->busy_ns + open;
}

const char *const dev_queue_names[DEV_Q_COUNT] = {"mem", "blas",    "rng",
                                                  "nn",  "modules", "collectives"};

const char *dev_task_label(const dev_task *t) {
  if (t->kind == DEV_TASK_OP) {
    const dev_op_info *info = t->call ? dev_op_info_of(t->call->op.h.kind) : NULL;
    return info ? info->label : "op";
  }
  if (t->kind == DEV_TASK_RELEASE)
    return "release";
  if (t->src_node == DEV_HOST_NODE)
    return "copy host to device";
  return t->node->index == DEV_HOST_NODE ? "copy device to host" : "copy device to device";
}

const char *dev_task_client(const dev_task *t) {
  return t->acct && t->acct->name && *t->acct->name ? t->acct->name : "?";
}

uint32_t dev_node_builds_running(dev_node *node, double *seconds) {
  pthread_mutex_lock(&node->build_mu); /* builds run on build threads */
  uint32_t n = node->modules_building;
  uint64_t since = node->building_since_ms;
  pthread_mutex_unlock(&node->build_mu);
  uint64_t now = rt_mono_ms();
  *seconds = n && now > since ? (double)(now - since) * 1e-3 : 0.0;
  return n;
}

#define WINDOW_NS 1000000000ull

void dev_busy_roll(dev_world *w, uint64_t now_ns) {
  for (int n = 1; n < w->nnodes; n++) {
    dev_node *node = &w->nodes[n];
    uint64_t total = dev_node_busy_total_ns(node, now_ns);
    if (node->busy_window_at_ns == 0) { /* the first reading opens the first window */
      node->busy_window_at_ns = now_ns;
      node->busy_window_ns = total;
      continue;
    }
    uint64_t span = now_ns - node->busy_window_at_ns;
    if (span < WINDOW_NS)
      continue;
    double share = (double)(total - node->busy_window_ns) / (double)span;
    node->busy_share = share > 1.0 ? 1.0 : share;
    node->busy_window_at_ns = now_ns;
    node->busy_window_ns = total;
  }
}
