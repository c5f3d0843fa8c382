/* Runs fuzz_graph.c's harness over the files (or directories of files) on
 * the command line: the kept corpus as a regression test, in every build. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  uint8_t *data = NULL;
  size_t size = 0, cap = 0, got;
  uint8_t chunk[4096];
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (size + got > cap) {
      cap = 2 * (size + got);
      uint8_t *more = realloc(data, cap);
      if (!more) abort();
      data = more;
    }
    memcpy(data + size, chunk, got);
    size += got;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(data, size);
  free(data);
  return 1;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int a = 1; a < argc; a++) {
    DIR *dir = opendir(argv[a]);
    if (!dir) {
      files += run_file(argv[a]);
      continue;
    }
    struct dirent *e;
    while ((e = readdir(dir))) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
      files += run_file(path);
    }
    closedir(dir);
  }
  printf("fuzz_graph_replay: %d inputs ran without a crash\n", files);
  return files ? 0 : 1;
}
