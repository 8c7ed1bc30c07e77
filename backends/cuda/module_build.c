/* CUDA C for a device (the `module` package, module.c): NVRTC compiles it, and what it made
 * is kept in two caches, so that a second load of the same source compiles nothing.
 *
 * Compiling: the options string is split into NVRTC's words (at blanks outside double quotes,
 * the quotes dropped); unless the caller names an architecture (-arch, --gpu-architecture),
 * the device's own is added: a CUBIN for sm_XY, or, when this NVRTC does not know sm_XY, PTX
 * for the newest compute_ZW it knows below it (the driver compiles that for the device). The
 * output is a CUBIN where NVRTC made one, else PTX.
 *
 * Caching: an entry is a blob of (what it was built from, the compiler's log, the image),
 * under a 64-bit hash of the first: the source, the options, the device's compute capability,
 * the driver's and NVRTC's versions. A hit compares what was built from in full, so a hash
 * collision is a miss, never someone else's code. Entries live in a table of this process
 * (MEM_ENTRIES at most, MEM_BYTES together, the least recently used goes first) and in the
 * backends' disk cache (disk_cache.h, kind "cuda"). Failed builds are not kept. Headers a
 * source includes through -I are not part of the key: a changed header needs a changed
 * source or option to be seen.
 *
 * Out of the process: with a be_compiler (acceld's build helper) the caches are looked in
 * here as ever, and only NVRTC's work runs in the helper (be_cuda_compile: no device, no
 * driver, just the compute capability in its target text).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "accel/error.h"
#include "backends/cuda/backend_cuda.h"
#include "backends/cuda/device.h"
#include "backends/cuda/nvrtc_lib.h"
#include "backends/disk_cache.h"
#include "runtime/alloc.h"

#define MEM_ENTRIES 64
#define MEM_BYTES ((size_t)128 << 20)
#define CACHE_KIND "cuda"
#define BLOB_VERSION 1u

static atomic_uint_fast64_t compiles, mem_hits, disk_hits;

/* ---- the log ------------------------------------------------------------------------- */

void be_cuda_log_append(char **log, const char *text) {
  size_t old = *log != NULL ? strlen(*log) : 0, n = strlen(text);
  if (n == 0)
    return;
  bool sep = old > 0 && (*log)[old - 1] != '\n';
  char *s = rt_realloc(*log, old + sep + n + 1);
  if (s == NULL)
    return; /* the log is a courtesy: without memory it stays shorter */
  if (sep)
    s[old++] = '\n';
  memcpy(s + old, text, n + 1);
  *log = s;
}

void be_cuda_log_finish(char **log) {
  for (const char *p = *log; p != NULL && *p != '\0'; p++)
    if (!isspace((unsigned char)*p))
      return;
  rt_free(*log);
  *log = NULL;
}

/* ---- what a build is made from --------------------------------------------------------- */

typedef struct ident {
  unsigned char *p;
  size_t len;
  uint64_t key;
} ident;

static int ident_make(be_device *dev, const be_nvrtc_api *nv, const void *code, size_t len,
                      const char *options, ident *id) {
  int drv = 0;
  be_cu.cuDriverGetVersion(&drv);
  char head[128];
  int n = snprintf(head, sizeof head, "cuda-c %u cc %d driver %d nvrtc %d.%d", BLOB_VERSION,
                   dev->cc, drv, nv->major, nv->minor);
  const char *opt = options != NULL ? options : "";
  size_t olen = strlen(opt);
  id->len = (size_t)n + 1 + olen + 1 + len;
  id->p = rt_malloc(id->len);
  if (id->p == NULL)
    return ACCEL_ENOMEM;
  memcpy(id->p, head, (size_t)n + 1);
  memcpy(id->p + n + 1, opt, olen + 1);
  if (len > 0)
    memcpy(id->p + n + 1 + olen + 1, code, len);
  id->key = be_cache_hash(BE_CACHE_HASH_INIT, id->p, id->len);
  return 0;
}

/* ---- blobs: (ident, log, image) ------------------------------------------------------ */

typedef struct blob_head {
  uint32_t version;
  uint32_t ident_len, log_len, image_len;
} blob_head;

static unsigned char *blob_make(const ident *id, const char *log, const be_cuda_image *img,
                                size_t *len) {
  blob_head h = {BLOB_VERSION, (uint32_t)id->len, log != NULL ? (uint32_t)strlen(log) : 0,
                 (uint32_t)img->len};
  *len = sizeof h + h.ident_len + h.log_len + h.image_len;
  if (id->len > BE_CACHE_MAX || img->len > BE_CACHE_MAX || *len > BE_CACHE_MAX)
    return NULL;
  unsigned char *b = rt_malloc(*len), *p = b;
  if (b == NULL)
    return NULL;
  memcpy(p, &h, sizeof h);
  memcpy(p += sizeof h, id->p, h.ident_len);
  if (h.log_len > 0)
    memcpy(p += h.ident_len, log, h.log_len);
  else
    p += h.ident_len;
  memcpy(p + h.log_len, img->data, h.image_len);
  return b;
}

/* malloc'd copy of n bytes and a NUL (PTX must end in one; a CUBIN does not mind). */
static void *dup_nul(const void *p, size_t n) {
  char *s = rt_malloc(n + 1);
  if (s != NULL) {
    memcpy(s, p, n);
    s[n] = '\0';
  }
  return s;
}

/* The image and log of blob b if it was built from id: 0, ACCEL_ENOENT (another build, or
 * not a blob) or ACCEL_ENOMEM. */
static int blob_open(const unsigned char *b, size_t len, const ident *id, be_cuda_image *img,
                     char **log) {
  blob_head h;
  if (len < sizeof h)
    return ACCEL_ENOENT;
  memcpy(&h, b, sizeof h);
  if (h.version != BLOB_VERSION || h.ident_len != id->len || h.image_len == 0 ||
      (uint64_t)sizeof h + h.ident_len + h.log_len + h.image_len != len ||
      memcmp(b + sizeof h, id->p, id->len) != 0)
    return ACCEL_ENOENT;
  const unsigned char *text = b + sizeof h + h.ident_len, *bin = text + h.log_len;
  char *l = h.log_len > 0 ? dup_nul(text, h.log_len) : NULL;
  img->data = dup_nul(bin, h.image_len);
  img->len = h.image_len;
  if (img->data == NULL || (h.log_len > 0 && l == NULL)) {
    rt_free(img->data);
    rt_free(l);
    img->data = NULL;
    return ACCEL_ENOMEM;
  }
  if (l != NULL)
    be_cuda_log_append(log, l);
  rt_free(l);
  return 0;
}

/* ---- the table of this process --------------------------------------------------------- */

typedef struct mem_entry {
  uint64_t key, used; /* used: the tick of its last use; 0: an empty slot */
  unsigned char *blob;
  size_t len;
} mem_entry;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_entry mem[MEM_ENTRIES];
static size_t mem_total;
static uint64_t mem_tick;

static int mem_find(const ident *id, be_cuda_image *img, char **log) {
  int rc = ACCEL_ENOENT;
  pthread_mutex_lock(&mem_lock);
  for (int i = 0; i < MEM_ENTRIES && rc == ACCEL_ENOENT; i++)
    if (mem[i].used != 0 && mem[i].key == id->key) {
      rc = blob_open(mem[i].blob, mem[i].len, id, img, log);
      if (rc == 0)
        mem[i].used = ++mem_tick;
    }
  pthread_mutex_unlock(&mem_lock);
  if (rc == 0)
    atomic_fetch_add(&mem_hits, 1);
  return rc;
}

/* Under mem_lock. */
static void mem_drop(mem_entry *e) {
  mem_total -= e->len;
  rt_free(e->blob);
  *e = (mem_entry){0};
}

/* Under mem_lock: a slot for len more bytes, emptied of the least recently used entries. */
static mem_entry *mem_room(size_t len) {
  for (;;) {
    mem_entry *lru = NULL, *empty = NULL;
    for (int i = 0; i < MEM_ENTRIES; i++) {
      if (mem[i].used == 0)
        empty = empty != NULL ? empty : &mem[i];
      else if (lru == NULL || mem[i].used < lru->used)
        lru = &mem[i];
    }
    if (empty != NULL && mem_total + len <= MEM_BYTES)
      return empty;
    if (lru == NULL)
      return NULL;
    mem_drop(lru);
  }
}

/* Keeps the blob (taken: freed here if it is not kept). */
static void mem_put(uint64_t key, unsigned char *blob, size_t len) {
  if (len > MEM_BYTES) {
    rt_free(blob);
    return;
  }
  pthread_mutex_lock(&mem_lock);
  for (int i = 0; i < MEM_ENTRIES; i++)
    if (mem[i].used != 0 && mem[i].key == key)
      mem_drop(&mem[i]);
  mem_entry *e = mem_room(len);
  if (e != NULL) {
    *e = (mem_entry){.key = key, .used = ++mem_tick, .blob = blob, .len = len};
    mem_total += len;
    blob = NULL;
  }
  pthread_mutex_unlock(&mem_lock);
  rt_free(blob);
}

void be_cuda_module_cache_drop(void) {
  pthread_mutex_lock(&mem_lock);
  for (int i = 0; i < MEM_ENTRIES; i++)
    if (mem[i].used != 0)
      mem_drop(&mem[i]);
  pthread_mutex_unlock(&mem_lock);
}

void be_cuda_module_cache_stats(be_cuda_module_stats *out) {
  out->compiles = atomic_load(&compiles);
  out->memory_hits = atomic_load(&mem_hits);
  out->disk_hits = atomic_load(&disk_hits);
}

/* ---- the disk cache ------------------------------------------------------------------ */

static int disk_find(const ident *id, be_cuda_image *img, char **log) {
  void *data = NULL;
  size_t len = 0;
  if (be_cache_read(CACHE_KIND, id->key, &data, &len) != 0)
    return ACCEL_ENOENT;
  int rc = blob_open(data, len, id, img, log);
  if (rc == 0) {
    mem_put(id->key, data, len);
    atomic_fetch_add(&disk_hits, 1);
  } else {
    rt_free(data);
  }
  return rc;
}

static void keep(const ident *id, const char *log, const be_cuda_image *img) {
  size_t len = 0;
  unsigned char *blob = blob_make(id, log, img, &len);
  if (blob == NULL)
    return;
  be_cache_write(CACHE_KIND, id->key, blob, len);
  mem_put(id->key, blob, len);
}

/* ---- NVRTC ---------------------------------------------------------------------------- */

/* The words of s in argv (pointing into *store), with room for one more: 0, ACCEL_ENOMEM, or
 * ACCEL_EBUILD for an unbalanced quote. Each word's text takes at most its input and a NUL,
 * and words are at least two input characters apart, so n + 1 bytes and n / 2 + 3 pointers
 * always suffice. */
static int split_words(const char *s, char **store, char ***argv, int *argc) {
  size_t n = strlen(s);
  char *w = *store = rt_malloc(n + 1);
  char **v = *argv = rt_malloc((n / 2 + 3) * sizeof *v);
  if (w == NULL || v == NULL)
    return ACCEL_ENOMEM;
  bool quoted = false, in_word = false;
  int c = 0;
  for (const char *p = s; *p != '\0'; p++) {
    if (!quoted && isspace((unsigned char)*p)) {
      if (in_word)
        *w++ = '\0';
      in_word = false;
      continue;
    }
    if (!in_word)
      v[c++] = w;
    in_word = true;
    if (*p == '"')
      quoted = !quoted;
    else
      *w++ = *p;
  }
  if (in_word)
    *w = '\0';
  *argc = c;
  return quoted ? ACCEL_EBUILD : 0;
}

static bool names_arch(char **argv, int argc) {
  for (int i = 0; i < argc; i++)
    if (strncmp(argv[i], "-arch", 5) == 0 || strncmp(argv[i], "--gpu-architecture", 18) == 0)
      return true;
  return false;
}

/* The newest architecture this NVRTC knows at or below cc (cc itself if it cannot say). */
static int known_arch(const be_nvrtc_api *nv, int cc) {
  int n = 0, archs[256], best = 0;
  if (nv->nvrtcGetNumSupportedArchs == NULL || nv->nvrtcGetSupportedArchs == NULL ||
      nv->nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > 256 ||
      nv->nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS)
    return cc;
  for (int i = 0; i < n; i++)
    if (archs[i] <= cc && archs[i] > best)
      best = archs[i];
  return best > 0 ? best : cc;
}

static void arch_option(const be_nvrtc_api *nv, int cc, char *buf, size_t len) {
  int arch = known_arch(nv, cc);
  snprintf(buf, len, "--gpu-architecture=%s_%d", arch == cc ? "sm" : "compute", arch);
}

static void program_log(const be_nvrtc_api *nv, nvrtcProgram prog, char **log) {
  size_t n = 0;
  if (nv->nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1)
    return;
  char *s = rt_malloc(n);
  if (s != NULL && nv->nvrtcGetProgramLog(prog, s) == NVRTC_SUCCESS) {
    s[n - 1] = '\0';
    be_cuda_log_append(log, s);
  }
  rt_free(s);
}

/* The CUBIN NVRTC made, else its PTX. */
static int program_image(const be_nvrtc_api *nv, nvrtcProgram prog, be_cuda_image *img) {
  size_t n = 0;
  bool cubin = nv->nvrtcGetCUBINSize != NULL && nv->nvrtcGetCUBIN != NULL &&
               nv->nvrtcGetCUBINSize(prog, &n) == NVRTC_SUCCESS && n > 0;
  if (!cubin && (nv->nvrtcGetPTXSize(prog, &n) != NVRTC_SUCCESS || n == 0))
    return ACCEL_EBUILD;
  char *p = rt_malloc(n + 1);
  if (p == NULL)
    return ACCEL_ENOMEM;
  nvrtcResult r = cubin ? nv->nvrtcGetCUBIN(prog, p) : nv->nvrtcGetPTX(prog, p);
  if (r != NVRTC_SUCCESS) {
    rt_free(p);
    return ACCEL_EBUILD;
  }
  p[n] = '\0';
  *img = (be_cuda_image){p, n};
  return 0;
}

static int nvrtc_status(const be_nvrtc_api *nv, nvrtcResult r, char **log) {
  if (r == NVRTC_SUCCESS)
    return 0;
  if (r == NVRTC_ERROR_OUT_OF_MEMORY)
    return ACCEL_ENOMEM;
  if (r != NVRTC_ERROR_COMPILATION) /* the log says why a compilation failed; else this */
    be_cuda_log_append(log, nv->nvrtcGetErrorString(r));
  return ACCEL_EBUILD;
}

static int run_nvrtc(const be_nvrtc_api *nv, const char *src, char **argv, int argc,
                     be_cuda_image *img, char **log) {
  nvrtcProgram prog = NULL;
  atomic_fetch_add(&compiles, 1);
  int rc = nvrtc_status(nv, nv->nvrtcCreateProgram(&prog, src, "module.cu", 0, NULL, NULL), log);
  if (rc != 0)
    return rc;
  rc = nvrtc_status(nv, nv->nvrtcCompileProgram(prog, argc, (const char *const *)argv), log);
  program_log(nv, prog, log);
  if (rc == 0)
    rc = program_image(nv, prog, img);
  nv->nvrtcDestroyProgram(&prog);
  return rc;
}

static int compile(int cc, const be_nvrtc_api *nv, const void *code, size_t len,
                   const char *options, be_cuda_image *img, char **log) {
  char *src = dup_nul(code, len), *store = NULL, **argv = NULL, arch[64];
  int argc = 0;
  int rc = src == NULL ? ACCEL_ENOMEM
                       : split_words(options != NULL ? options : "", &store, &argv, &argc);
  if (rc == ACCEL_EBUILD)
    be_cuda_log_append(log, "accel: unbalanced double quote in the options");
  if (rc == 0 && !names_arch(argv, argc)) {
    arch_option(nv, cc, arch, sizeof arch);
    argv[argc++] = arch;
  }
  if (rc == 0)
    rc = run_nvrtc(nv, src, argv, argc, img, log);
  rt_free(argv);
  rt_free(store);
  rt_free(src);
  return rc;
}

/* NVRTC in c's place (acceld's build helper, which runs be_cuda_compile there). */
static int compile_by(const be_compiler *c, int cc, const void *code, size_t len,
                      const char *options, be_cuda_image *img, char **log) {
  char target[16];
  snprintf(target, sizeof target, "%d", cc);
  void *image = NULL;
  size_t n = 0;
  atomic_fetch_add(&compiles, 1);
  int rc = c->compile(c, target, ACCEL_SOURCE_CUDA, code, len, options, &image, &n, log);
  if (rc != 0)
    return rc;
  img->data = dup_nul(image, n);
  img->len = n;
  rt_free(image);
  return img->data != NULL ? 0 : ACCEL_ENOMEM;
}

int be_cuda_build(be_device *dev, const be_compiler *c, const void *code, size_t len,
                  const char *options, be_cuda_image *img, char **log) {
  const be_nvrtc_api *nv = be_nvrtc();
  if (nv == NULL)
    return ACCEL_ENOTSUP;
  ident id;
  int rc = ident_make(dev, nv, code, len, options, &id);
  if (rc != 0)
    return rc;
  rc = mem_find(&id, img, log);
  if (rc == ACCEL_ENOENT)
    rc = disk_find(&id, img, log);
  if (rc == ACCEL_ENOENT) {
    rc = c ? compile_by(c, dev->cc, code, len, options, img, log)
           : compile(dev->cc, nv, code, len, options, img, log);
    if (rc == 0)
      keep(&id, *log, img);
  }
  rt_free(id.p);
  return rc;
}

int be_cuda_compile(const char *target, uint32_t source, const void *code, size_t len,
                    const char *options, void **image, size_t *image_len, char **log) {
  *log = NULL;
  char *end = NULL;
  long cc = strtol(target, &end, 10);
  if (source != ACCEL_SOURCE_CUDA)
    return ACCEL_ENOTSUP;
  if (end == target || *end != '\0' || cc <= 0 || cc > 10000)
    return ACCEL_EINVAL;
  const be_nvrtc_api *nv = be_nvrtc();
  if (nv == NULL)
    return ACCEL_ENOTSUP;
  be_cuda_image img = {0};
  int rc = compile((int)cc, nv, code, len, options, &img, log);
  be_cuda_log_finish(log);
  if (rc == 0) {
    *image = img.data;
    *image_len = img.len;
  }
  return rc;
}
