/* Busy time per device (busy.h). A device is busy while some work submitted to one of its
 * queues has not completed: the union of the queues' in-flight spans, so two queues running
 * at once count once. That is how nvidia-smi's GPU-Util is defined too (the share of a period
 * in which a kernel ran), measured from the submitting side: it includes time work waits on
 * the device behind other work, and the completion's trip back to the loop. */
#include "actors/busy.h"

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
