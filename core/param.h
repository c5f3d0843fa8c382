/* Every environment variable the library reads: one table (CG_PARAM_LIST),
 * one parser per kind of value, and the documentation of each in one place
 * (docs/architecture.md lists them from this table). A value that does not
 * parse is reported once per process on stderr, naming the variable, what it
 * holds and what it takes, and is then treated as unset, so a typo never
 * changes behaviour silently. Read through these functions only: nothing
 * else in the library calls getenv. */
#ifndef CG_CORE_PARAM_H
#define CG_CORE_PARAM_H

#include <stddef.h>

/* X(id, variable, kind, what it takes, what it does) */
#define CG_PARAM_LIST(X)                                                                                    \
  X(CG_PARAM_TIMEOUT, "CG_TIMEOUT", CG_PARAM_SECONDS, "seconds > 0",                                        \
    "replay watchdog timeout of plans compiled with timeout_s 0")                                           \
  X(CG_PARAM_FUSION, "CG_FUSION", CG_PARAM_SWITCH, "0/off/no or 1/on/yes",                                  \
    "0 turns fusion off for every plan (compile options can only turn it off too)")                         \
  X(CG_PARAM_BUCKET_BYTES, "CG_BUCKET_BYTES", CG_PARAM_BYTES, "a size: 65536, 64K, 25M, 1G",               \
    "largest bucket when the compile options give none (before the backend's preference)")                 \
  X(CG_PARAM_CHUNK_BYTES, "CG_CHUNK_BYTES", CG_PARAM_BYTES, "a size: 65536, 64K, 4M",                      \
    "message chunk of the staged backends when the communicator options give none")                       \
  X(CG_PARAM_BCAST_CHAIN_BYTES, "CG_BCAST_CHAIN_BYTES", CG_PARAM_BYTES_OR_NEVER, "a size, or never",       \
    "staged backends: broadcasts from this size on go down a chain of ranks")                               \
  X(CG_PARAM_DEVICE, "CG_DEVICE", CG_PARAM_ORDINAL, "a device ordinal >= 0",                                \
    "the GPU cg_comm_create takes instead of local rank modulo GPUs")                                       \
  X(CG_PARAM_MPI_CUDA_AWARE, "CG_MPI_CUDA_AWARE", CG_PARAM_SWITCH, "0 or 1",                               \
    "overrides what MPI says of its CUDA support (mpi-staged backend)")                                    \
  X(CG_PARAM_FLIGHT_DIR, "CG_FLIGHT_DIR", CG_PARAM_PATH, "a directory",                                     \
    "where timeouts and cg_flight_dump write the flight recorder")

typedef enum cg_param_kind {
  CG_PARAM_SECONDS,         /* a positive decimal number */
  CG_PARAM_SWITCH,          /* 0/off/no/false or 1/on/yes/true */
  CG_PARAM_BYTES,           /* digits, then optional K, M or G (powers of 1024) */
  CG_PARAM_BYTES_OR_NEVER,  /* the same, or "never" (SIZE_MAX) */
  CG_PARAM_ORDINAL,         /* a non-negative integer */
  CG_PARAM_PATH,            /* any non-empty text */
} cg_param_kind_t;

typedef enum cg_param {
#define CG_PARAM_ENUM(id, variable, kind, takes, does) id,
  CG_PARAM_LIST(CG_PARAM_ENUM)
#undef CG_PARAM_ENUM
  CG_PARAM_COUNT
} cg_param_t;

/* The variable's name ("CG_TIMEOUT"). */
const char *cg_param_name(cg_param_t param);

/* The raw text: NULL when unset or empty. */
const char *cg_param_text(cg_param_t param);

/* Each returns 1 and sets *out when the variable is set and parses as its
 * kind (SWITCH: 0 or 1; BYTES: SIZE_MAX when too large; ORDINAL: up to
 * INT_MAX), 0 when it is unset or does not parse (reported on stderr once).
 * *out is left alone on 0. */
int cg_param_seconds(double *out, cg_param_t param);
int cg_param_switch(int *out, cg_param_t param);
int cg_param_bytes(size_t *out, cg_param_t param);
int cg_param_ordinal(int *out, cg_param_t param);

#endif
