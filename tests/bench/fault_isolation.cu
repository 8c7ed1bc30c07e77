// probe-fault-isolation: the facts behind running user kernels in a worker process that
// acceld supervises (docs/ARCHITECTURE.md, "Faults"; the design issue on surviving every
// client). Not a benchmark of accel: it measures, on the GPU alone, with the runtime API:
//   1. the hop: the parent ("acceld") orders a kernel of a worker process into its own stream
//      through inter-process events and a socket (parent records E1 and writes; the worker
//      waits on E1, launches, records E2 and answers; the parent waits on E2, launches its own
//      kernel and syncs), against the parent launching both kernels itself;
//   2. a fault in the worker (an illegal address, then a trap, each in a fresh worker) while
//      the parent keeps launching and syncing tiny kernels: the parent's errors (expected 0),
//      its longest gap between two completed kernels, and its own data intact afterwards;
//   3. what a fresh worker costs: exec to its first kernel done (the recovery time).
// Run on the GPU machine: build-gpu/tests/bench/probe-fault-isolation
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t _r = (x);                                                                          \
    if (_r != cudaSuccess) {                                                                       \
      printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(_r));               \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double med(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

__global__ void add_one(unsigned *p, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n)
    p[i] += 1;
}

__global__ void write_at(unsigned *p, unsigned v) {
  *p = v;
}

__global__ void trap_now() {
  __trap();
}

// What the parent hands a worker: the shared buffer and both events.
struct handoff {
  cudaIpcMemHandle_t shared;
  cudaIpcEventHandle_t to_worker, to_parent;
  size_t n;
};

enum cmd : int { CMD_HOP = 1, CMD_ILLEGAL = 2, CMD_TRAP = 3, CMD_QUIT = 4 };

static bool send_all(int fd, const void *p, size_t n) {
  return write(fd, p, n) == (ssize_t)n;
}

static bool recv_all(int fd, void *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)p + got, n - got);
    if (r <= 0)
      return false;
    got += (size_t)r;
  }
  return true;
}

// ---- the worker ----

static int worker(int fd) {
  handoff h;
  if (!recv_all(fd, &h, sizeof h))
    return 2;
  unsigned *shared;
  cudaEvent_t to_worker, to_parent;
  cudaStream_t st;
  CK(cudaIpcOpenMemHandle((void **)&shared, h.shared, cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenEventHandle(&to_worker, h.to_worker));
  CK(cudaIpcOpenEventHandle(&to_parent, h.to_parent));
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int ready = 0;
  send_all(fd, &ready, sizeof ready);
  for (int c; recv_all(fd, &c, sizeof c);) {
    int rc = 0;
    if (c == CMD_HOP) {
      CK(cudaStreamWaitEvent(st, to_worker, 0));
      add_one<<<1, 32, 0, st>>>(shared, 1);
      CK(cudaEventRecord(to_parent, st));
    } else if (c == CMD_ILLEGAL) {
      write_at<<<1, 1, 0, st>>>((unsigned *)(uintptr_t)0x10, 7);
      rc = (int)cudaStreamSynchronize(st);
    } else if (c == CMD_TRAP) {
      trap_now<<<1, 1, 0, st>>>();
      rc = (int)cudaStreamSynchronize(st);
    } else {
      break;
    }
    send_all(fd, &rc, sizeof rc);
    if (c != CMD_HOP)
      return 0; // a faulted context is unusable: the worker ends (it would be replaced)
  }
  return 0;
}

// ---- the parent ----

struct child {
  pid_t pid;
  int fd;
};

static child spawn_worker(const char *self) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    exit(1);
  char fdarg[16];
  snprintf(fdarg, sizeof fdarg, "%d", sv[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3); // the worker's socket is fd 3
  char *argv[] = {(char *)self, (char *)"--worker", (char *)"3", nullptr};
  child c{-1, sv[0]};
  if (posix_spawn(&c.pid, self, &fa, nullptr, argv, environ) != 0)
    exit(1);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  return c;
}

static void end_worker(child &c) {
  close(c.fd);
  int status;
  waitpid(c.pid, &status, 0);
}

struct parent_state {
  unsigned *shared, *own;
  size_t n;
  cudaEvent_t to_worker, to_parent;
  cudaStream_t st;
  handoff h;
};

// Spawns a worker and hands it the buffer and events; returns once it is ready.
static child start_worker(const char *self, parent_state &p) {
  child c = spawn_worker(self);
  int ready;
  if (!send_all(c.fd, &p.h, sizeof p.h) || !recv_all(c.fd, &ready, sizeof ready)) {
    printf("FAIL: the worker did not start\n");
    exit(1);
  }
  return c;
}

// One op ordered through the worker: parent work, worker kernel, parent kernel, sync.
static void hop_once(parent_state &p, child &c) {
  add_one<<<1, 32, 0, p.st>>>(p.own, 1);
  CK(cudaEventRecord(p.to_worker, p.st));
  int cmd = CMD_HOP, rc;
  send_all(c.fd, &cmd, sizeof cmd);
  recv_all(c.fd, &rc, sizeof rc);
  CK(cudaStreamWaitEvent(p.st, p.to_parent, 0));
  add_one<<<1, 32, 0, p.st>>>(p.own, 1);
  CK(cudaStreamSynchronize(p.st));
}

static void local_once(parent_state &p) {
  add_one<<<1, 32, 0, p.st>>>(p.own, 1);
  add_one<<<1, 32, 0, p.st>>>(p.shared, 1);
  add_one<<<1, 32, 0, p.st>>>(p.own, 1);
  CK(cudaStreamSynchronize(p.st));
}

static void measure_hop(const char *self, parent_state &p) {
  unsigned was[2];
  CK(cudaMemcpy(was, p.shared, sizeof was[0], cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(was + 1, p.own, sizeof was[1], cudaMemcpyDeviceToHost));
  child c = start_worker(self, p);
  std::vector<double> hop, local;
  for (int i = 0; i < 200; i++) { // warm-up
    hop_once(p, c);
    local_once(p);
  }
  for (int i = 0; i < 2000; i++) {
    double t0 = now();
    hop_once(p, c);
    double t1 = now();
    local_once(p);
    hop.push_back(t1 - t0);
    local.push_back(now() - t1);
  }
  unsigned got[2];
  CK(cudaMemcpy(got, p.shared, sizeof got[0], cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(got + 1, p.own, sizeof got[1], cudaMemcpyDeviceToHost));
  printf("hop: three kernels and a sync, the middle one in the worker: %.1f us (median of "
         "2000); all three in the parent: %.1f us; shared[0] = %u (want %u), own[0] = %u (want "
         "%u)\n",
         med(hop) * 1e6, med(local) * 1e6, got[0], was[0] + 2200 * 2, got[1], was[1] + 2200 * 4);
  int quit = CMD_QUIT;
  send_all(c.fd, &quit, sizeof quit);
  end_worker(c);
}

// The parent launches and syncs tiny kernels until `until`; returns its longest gap (s).
static double keep_serving(parent_state &p, double until, int *errors, long *ops) {
  double last = now(), gap = 0;
  while (now() < until) {
    add_one<<<1, 32, 0, p.st>>>(p.own, 1);
    cudaError_t e = cudaStreamSynchronize(p.st);
    *errors += e != cudaSuccess;
    double t = now();
    gap = std::max(gap, t - last);
    last = t;
    (*ops)++;
  }
  return gap;
}

static void measure_fault(const char *self, parent_state &p, int cmd, const char *what) {
  std::vector<unsigned> before(p.n), after(p.n);
  CK(cudaMemcpy(before.data(), p.own, p.n * 4, cudaMemcpyDeviceToHost));
  child c = start_worker(self, p);
  int errors = 0;
  long ops = 0;
  double gap0 = keep_serving(p, now() + 0.2, &errors, &ops); // the gap without a fault
  send_all(c.fd, &cmd, sizeof cmd);
  double t_fault = now();
  double gap = keep_serving(p, now() + 0.5, &errors, &ops);
  int wrc = -1;
  recv_all(c.fd, &wrc, sizeof wrc);
  end_worker(c);
  double t0 = now(); // recovery: a fresh worker's first kernel done
  child fresh = start_worker(self, p);
  hop_once(p, fresh);
  double recover = now() - t0;
  int quit = CMD_QUIT;
  send_all(fresh.fd, &quit, sizeof quit);
  end_worker(fresh);
  CK(cudaMemcpy(after.data(), p.own, p.n * 4, cudaMemcpyDeviceToHost));
  size_t changed = 0; // own[0] counts the parent's kernels; the rest must be untouched
  for (size_t i = 1; i < p.n; i++)
    changed += before[i] != after[i];
  printf("%s in the worker: worker saw %s; parent: %d errors in %ld ops, longest gap %.2f ms "
         "(%.2f ms without a fault), its other %zu words changed: %zu; a fresh worker's first "
         "kernel done %.1f ms after the old one ended (%.1f ms after the fault)\n",
         what, cudaGetErrorName((cudaError_t)wrc), errors, ops, gap * 1e3, gap0 * 1e3, p.n - 1,
         changed, recover * 1e3, (now() - t_fault) * 1e3);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--worker") == 0)
    return worker(atoi(argv[2]));
  signal(SIGPIPE, SIG_IGN);
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0)
    return 1;
  self[len] = '\0';
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  parent_state p{};
  p.n = 1 << 20;
  CK(cudaMalloc(&p.shared, p.n * 4));
  CK(cudaMalloc(&p.own, p.n * 4));
  CK(cudaMemset(p.shared, 0, p.n * 4));
  CK(cudaMemset(p.own, 0, p.n * 4));
  CK(cudaStreamCreateWithFlags(&p.st, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&p.to_worker, cudaEventDisableTiming | cudaEventInterprocess));
  CK(cudaEventCreateWithFlags(&p.to_parent, cudaEventDisableTiming | cudaEventInterprocess));
  CK(cudaIpcGetMemHandle(&p.h.shared, p.shared));
  CK(cudaIpcGetEventHandle(&p.h.to_worker, p.to_worker));
  CK(cudaIpcGetEventHandle(&p.h.to_parent, p.to_parent));
  p.h.n = p.n;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s\n", prop.name);
  measure_hop(self, p);
  measure_fault(self, p, CMD_ILLEGAL, "an illegal address");
  measure_fault(self, p, CMD_TRAP, "a trap");
  measure_hop(self, p); // the parent's context after two faults next to it
  return 0;
}
