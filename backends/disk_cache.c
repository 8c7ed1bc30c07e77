/* The backends' disk cache of built code (disk_cache.h). */
#include "backends/disk_cache.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/error.h"
#include "runtime/alloc.h"

#define CACHE_MAGIC "ACCLBIN1"

typedef struct cache_head {
  char magic[8];
  uint64_t size, hash;
} cache_head;

uint64_t be_cache_hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ s[i]) * 0x100000001b3ull;
  return h;
}

/* $CACHE_DIRECTORY is systemd's CacheDirectory= (acceld.service), the first of its
 * colon-separated paths: under DynamicUser= and ProtectSystem=strict the one writable place
 * for a cache ($HOME is / there, read-only). */
static int cache_dir(char *buf, size_t len) {
  const char *env = getenv("ACCEL_CACHE_DIR"), *unit = getenv("CACHE_DIRECTORY");
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (env != NULL && env[0] != '\0')
    n = snprintf(buf, len, "%s", env);
  else if (unit != NULL && unit[0] != '\0')
    n = snprintf(buf, len, "%.*s", (int)strcspn(unit, ":"), unit);
  else if (xdg != NULL && xdg[0] != '\0')
    n = snprintf(buf, len, "%s/accel", xdg);
  else if (home != NULL && home[0] != '\0')
    n = snprintf(buf, len, "%s/.cache/accel", home);
  else
    return ACCEL_ENOENT;
  return n > 0 && (size_t)n < len ? 0 : ACCEL_ENOENT;
}

int be_cache_path(const char *kind, uint64_t key, char *buf, size_t len) {
  char dir[4096];
  if (kind == NULL || buf == NULL || cache_dir(dir, sizeof dir) != 0)
    return ACCEL_ENOENT;
  int n = snprintf(buf, len, "%s/%s-%016llx.bin", dir, kind, (unsigned long long)key);
  return n > 0 && (size_t)n < len ? 0 : ACCEL_ENOENT;
}

/* ---- reading -------------------------------------------------------------------------- */

/* The payload of f if the file is whole and its hash matches, else NULL. */
static unsigned char *read_valid(FILE *f, size_t *size) {
  cache_head h;
  if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, CACHE_MAGIC, 8) != 0 || h.size == 0 ||
      h.size > BE_CACHE_MAX)
    return NULL;
  unsigned char *p = rt_malloc(h.size);
  if (p == NULL)
    return NULL;
  if (fread(p, 1, h.size, f) != h.size || fgetc(f) != EOF ||
      be_cache_hash(BE_CACHE_HASH_INIT, p, h.size) != h.hash) {
    rt_free(p);
    return NULL;
  }
  *size = h.size;
  return p;
}

int be_cache_read(const char *kind, uint64_t key, void **data, size_t *len) {
  char path[4200];
  if (data == NULL || len == NULL || be_cache_path(kind, key, path, sizeof path) != 0)
    return ACCEL_ENOENT;
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return ACCEL_ENOENT;
  size_t size = 0;
  unsigned char *p = read_valid(f, &size);
  fclose(f);
  if (p == NULL)
    return ACCEL_ENOENT;
  *data = p;
  *len = size;
  return 0;
}

/* ---- writing -------------------------------------------------------------------------- */

static void mkdirs(const char *path) {
  char tmp[4200];
  if (strlen(path) >= sizeof tmp)
    return;
  memcpy(tmp, path, strlen(path) + 1);
  for (char *s = tmp + 1; *s != '\0'; s++)
    if (*s == '/') {
      *s = '\0';
      mkdir(tmp, 0700);
      *s = '/';
    }
}

static bool write_all(FILE *f, const void *data, size_t len) {
  cache_head h = {.size = len, .hash = be_cache_hash(BE_CACHE_HASH_INIT, data, len)};
  memcpy(h.magic, CACHE_MAGIC, 8);
  return fwrite(&h, sizeof h, 1, f) == 1 && fwrite(data, 1, len, f) == len;
}

/* A temporary file of its own per writer (mkstemp): two threads or processes storing the
 * same entry at once each rename a whole file into place. */
void be_cache_write(const char *kind, uint64_t key, const void *data, size_t len) {
  char path[4200], tmp[4300];
  if (data == NULL || len == 0 || len > BE_CACHE_MAX ||
      be_cache_path(kind, key, path, sizeof path) != 0)
    return;
  int n = snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
  if (n <= 0 || (size_t)n >= sizeof tmp)
    return;
  mkdirs(path);
  int fd = mkstemp(tmp);
  if (fd < 0)
    return;
  FILE *f = fdopen(fd, "wb");
  if (f == NULL) {
    close(fd);
    unlink(tmp);
    return;
  }
  bool ok = write_all(f, data, len);
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0)
    unlink(tmp);
}
