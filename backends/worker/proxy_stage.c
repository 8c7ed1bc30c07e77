/* The staging region of a worker (proxy.h): a memfd both processes map, handed out in pages
 * of BW_STAGE_PAGE, first fit. A copy takes its pages when it is submitted and they come back
 * with its completion, so a full region only means waiting for the device. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/worker/proxy.h"

bool bw_stage_init(bw_link *l, size_t bytes) {
  size_t pages = (bytes + BW_STAGE_PAGE - 1) / BW_STAGE_PAGE;
  if (pages < 4)
    pages = 4;
  bytes = pages * BW_STAGE_PAGE;
  l->stage_fd = memfd_create("accel-stage", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  /* Sealed: a worker that shrank it would turn acceld's next copy into SIGBUS. */
  if (l->stage_fd < 0 || ftruncate(l->stage_fd, (off_t)bytes) != 0 ||
      fcntl(l->stage_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return false;
  l->stage = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, l->stage_fd, 0);
  if (l->stage == MAP_FAILED) {
    l->stage = NULL;
    return false;
  }
  l->page_used = calloc(pages, 1);
  l->stage_bytes = bytes;
  l->stage_pages = pages;
  return l->page_used != NULL;
}

void bw_stage_fini(bw_link *l) {
  if (l->stage != NULL)
    munmap(l->stage, l->stage_bytes);
  if (l->stage_fd >= 0)
    close(l->stage_fd);
  free(l->page_used);
  l->stage = NULL;
  l->stage_fd = -1;
  l->page_used = NULL;
}

/* The first run of n free pages, or SIZE_MAX. */
static size_t first_fit(const bw_link *l, size_t n) {
  size_t run = 0;
  for (size_t i = 0; i < l->stage_pages; i++) {
    run = l->page_used[i] ? 0 : run + 1;
    if (run == n)
      return i + 1 - n;
  }
  return SIZE_MAX;
}

bool bw_stage_take(bw_link *l, size_t bytes, size_t *off) {
  size_t n = (bytes + BW_STAGE_PAGE - 1) / BW_STAGE_PAGE;
  if (n == 0)
    n = 1;
  size_t at;
  bool flushed = false;
  while (!l->dead && (at = first_fit(l, n)) == SIZE_MAX) {
    if (!flushed) {
      /* The copies whose completions give pages back may sit in the cork of this very thread's
       * loop: they go out before it waits (mu is not held while writing, as elsewhere). */
      pthread_mutex_unlock(&l->mu);
      bw_link_flush(l);
      pthread_mutex_lock(&l->mu);
      flushed = true;
      continue;
    }
    pthread_cond_wait(&l->cv, &l->mu);
  }
  if (l->dead)
    return false;
  for (size_t i = 0; i < n; i++)
    l->page_used[at + i] = 1;
  *off = at * BW_STAGE_PAGE;
  return true;
}

void bw_stage_give(bw_link *l, size_t off, size_t bytes) {
  size_t n = (bytes + BW_STAGE_PAGE - 1) / BW_STAGE_PAGE;
  if (n == 0)
    n = 1;
  for (size_t i = 0; i < n; i++)
    l->page_used[off / BW_STAGE_PAGE + i] = 0;
}
