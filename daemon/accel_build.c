/* accel-build: the helper process in which acceld compiles a client's code (OpenCL C, SPIR-V,
 * CUDA C) with a memory cap and a deadline, installed beside acceld in libexec. acceld runs
 * it; by hand it does nothing useful (backends/build_child.h describes the exchange). */
#include "backends/build_child.h"

int main(int argc, char **argv) {
  return be_child_main(argc, argv);
}
