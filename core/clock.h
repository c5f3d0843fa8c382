/* The library's one monotonic clock: timeouts, the watchdog's progress,
 * host profiles and tuning's replay times all read it (clock.c). */
#ifndef CG_CLOCK_H
#define CG_CLOCK_H

#include <stdint.h>

/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t cg_clock_ns(void);

#endif
