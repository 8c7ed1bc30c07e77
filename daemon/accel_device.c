/* accel-device: the worker process in which acceld runs a backend's devices (their contexts,
 * queues and memory), so that a fault there costs those devices and not the daemon
 * (backends/worker/worker.h). acceld starts it; by hand it does nothing useful. */
#include "backends/worker/worker.h"

int main(int argc, char **argv) {
  return bw_worker_main(argc, argv);
}
