#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "clock.h"

#include <time.h>

uint64_t cg_clock_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
