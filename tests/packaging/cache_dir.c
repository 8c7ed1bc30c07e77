/* The kernel cache's directory as acceld's unit gives it: systemd's CacheDirectory= arrives as
 * $CACHE_DIRECTORY (backends/disk_cache.h). Under DynamicUser= and ProtectSystem=strict $HOME
 * is / and read-only, so without it the service would never keep a built kernel. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/disk_cache.h"
#include "runtime/alloc.h"
#include "test.h"

/* The environment of a unit: HOME=/ (read-only there), no ACCEL_CACHE_DIR, no XDG. */
static void unit_env(const char *cache_directory) {
  CHECK_EQ(setenv("HOME", "/", 1), 0);
  CHECK_EQ(unsetenv("XDG_CACHE_HOME"), 0);
  CHECK_EQ(unsetenv("ACCEL_CACHE_DIR"), 0);
  CHECK_EQ(setenv("CACHE_DIRECTORY", cache_directory, 1), 0);
}

TEST(cache_directory_is_used_under_systemd) {
  char path[PATH_MAX];
  unit_env("/var/cache/accel");
  CHECK_OK(be_cache_path("k", 0x2a, path, sizeof path));
  CHECK_STR_EQ(path, "/var/cache/accel/k-000000000000002a.bin");
  /* several CacheDirectory= entries: systemd joins them with ':'; the first is accel's */
  unit_env("/var/cache/accel:/var/cache/other");
  CHECK_OK(be_cache_path("k", 1, path, sizeof path));
  CHECK_STR_EQ(path, "/var/cache/accel/k-0000000000000001.bin");
}

/* An explicit ACCEL_CACHE_DIR still wins (tests, and operators who set it in the unit). */
TEST(accel_cache_dir_comes_first) {
  char path[PATH_MAX];
  unit_env("/var/cache/accel");
  CHECK_EQ(setenv("ACCEL_CACHE_DIR", "/srv/kernels", 1), 0);
  CHECK_OK(be_cache_path("k", 1, path, sizeof path));
  CHECK_STR_EQ(path, "/srv/kernels/k-0000000000000001.bin");
}

/* An entry written is read back from that directory. */
TEST(entries_round_trip_in_cache_directory) {
  char dir[] = "/tmp/accel-cache-dir-XXXXXX", path[PATH_MAX];
  CHECK(mkdtemp(dir) != NULL);
  unit_env(dir);
  static const char payload[] = "built kernel";
  be_cache_write("k", 7, payload, sizeof payload);
  void *data = NULL;
  size_t len = 0;
  CHECK_OK(be_cache_read("k", 7, &data, &len));
  CHECK_EQ(len, sizeof payload);
  CHECK(memcmp(data, payload, len) == 0);
  rt_free(data);
  CHECK_OK(be_cache_path("k", 7, path, sizeof path));
  CHECK(strncmp(path, dir, strlen(dir)) == 0);
  struct stat st;
  CHECK_EQ(stat(path, &st), 0);
  CHECK_EQ(unlink(path), 0);
  CHECK_EQ(rmdir(dir), 0);
}

static const test_case tests[] = {
    TEST_CASE(cache_directory_is_used_under_systemd),
    TEST_CASE(accel_cache_dir_comes_first),
    TEST_CASE(entries_round_trip_in_cache_directory),
};

TEST_MAIN(tests)
