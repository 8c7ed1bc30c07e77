/* A plain main() for a libFuzzer target: runs every file of the directories (or files) it is
 * given through LLVMFuzzerTestOneInput, each as an exact-size copy so that a read past the end
 * is one past the allocation. The seed corpus as a regression test, with any compiler. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return -1;
  static uint8_t buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  uint8_t *copy = malloc(n ? n : 1);
  if (copy == NULL)
    return -1;
  memcpy(copy, buf, n);
  LLVMFuzzerTestOneInput(copy, n);
  free(copy);
  return 0;
}

static int run_path(const char *path, int *count) {
  struct stat st;
  if (stat(path, &st) != 0)
    return -1;
  if (!S_ISDIR(st.st_mode)) {
    (*count)++;
    return run_file(path);
  }
  DIR *d = opendir(path);
  if (d == NULL)
    return -1;
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.')
      continue;
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    rc = run_path(sub, count);
  }
  closedir(d);
  return rc;
}

int main(int argc, char **argv) {
  const char *me = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  int count = 0;
  for (int i = 1; i < argc; i++)
    if (run_path(argv[i], &count) != 0) {
      fprintf(stderr, "%s: cannot read %s\n", me, argv[i]);
      return 1;
    }
  printf("%s: %d inputs, no failure\n", me, count);
  return count > 0 ? 0 : 1; /* an empty corpus tests nothing */
}
