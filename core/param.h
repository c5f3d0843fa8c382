/* Every environment variable the library reads: one table (CG_PARAM_LIST),
 * one parser per kind of value, and the documentation of each in one place
 * (docs/architecture.md lists them from this table). A value that does not
 * parse is an error: the parser returns CG_ERR_INVALID_ARGUMENT with the
 * detail (cg_error_last) naming the public call, the variable, its value, what
 * it takes and a good value, and the public call that read it fails with
 * that status, so a typo never changes behaviour silently. Read through these
 * functions only: nothing else in the library calls getenv. */
#ifndef CG_CORE_PARAM_H
#define CG_CORE_PARAM_H

#include <stddef.h>

#include "commgraph/status.h"

/* X(id, variable, kind, what it takes, a good value, what it does) */
#define CG_PARAM_LIST(X)                                                                                    \
  X(CG_PARAM_TIMEOUT, "CG_TIMEOUT", CG_PARAM_SECONDS, "seconds > 0", "30",                                  \
    "replay watchdog timeout of plans compiled with timeout_s 0")                                           \
  X(CG_PARAM_FUSION, "CG_FUSION", CG_PARAM_SWITCH, "0/off/no/false or 1/on/yes/true", "0",                  \
    "0 turns fusion off for every plan (compile options can only turn it off too)")                         \
  X(CG_PARAM_BUCKET_BYTES, "CG_BUCKET_BYTES", CG_PARAM_BYTES, "a size: 65536, 64K, 25M, 1G", "25M",        \
    "largest bucket when the compile options give none (before the backend's preference)")                 \
  X(CG_PARAM_CHUNK_BYTES, "CG_CHUNK_BYTES", CG_PARAM_BYTES, "a size: 65536, 64K, 4M", "4M",                \
    "message chunk of the staged backends when the communicator options give none")                       \
  X(CG_PARAM_BCAST_CHAIN_BYTES, "CG_BCAST_CHAIN_BYTES", CG_PARAM_BYTES_OR_NEVER, "a size, or never", "16M", \
    "staged backends: broadcasts from this size on go down a chain of ranks")                               \
  X(CG_PARAM_SYMMETRIC_MAX_BYTES, "CG_SYMMETRIC_MAX_BYTES", CG_PARAM_BYTES_OR_NEVER, "a size, or never", "64K",  \
    "allreduces in cg_nccl_arena_create arenas up to this size take NCCL's symmetric kernels, larger ones the "  \
    "plain kernels (never: every size symmetric); unset: measured when the arena is made")                     \
  X(CG_PARAM_ONESHOT_MAX_BYTES, "CG_ONESHOT_MAX_BYTES", CG_PARAM_BYTES, "a size: 0 (never), 64K, 1M", "64K",   \
    "NCCL communicators with peer links: allreduces (sum, avg, min, max, prod) of float32/16, bfloat16 up to "   \
    "this size (at most 1M) take commgraph's one-shot kernel; unset: measured on the first plan that has one")                        \
  X(CG_PARAM_TWOSHOT_MAX_BYTES, "CG_TWOSHOT_MAX_BYTES", CG_PARAM_BYTES, "a size: 0 (never), 4M, 8M", "4M",  \
    "NCCL communicators with peer links: those allreduces above the one-shot kernel's size and up to this size " \
    "(at most 8M) take commgraph's two-shot kernel; 0 also saves its staging; unset: measured with the one-shot") \
  X(CG_PARAM_DEVICE, "CG_DEVICE", CG_PARAM_ORDINAL, "a device ordinal >= 0", "0",                           \
    "the GPU cg_comm_create takes instead of local rank modulo GPUs")                                       \
  X(CG_PARAM_MPI_CUDA_AWARE, "CG_MPI_CUDA_AWARE", CG_PARAM_SWITCH, "0 or 1", "1",                          \
    "overrides what MPI says of its CUDA support (mpi-staged backend)")                                    \
  X(CG_PARAM_FLIGHT_DIR, "CG_FLIGHT_DIR", CG_PARAM_PATH, "a directory", "/tmp",                             \
    "where a timeout writes the flight recorder (cg_flight_dump writes to the FILE it is given)")                                          \
  X(CG_PARAM_NCCL_P2P_DISABLE, "NCCL_P2P_DISABLE", CG_PARAM_ORDINAL, "an integer >= 0", "1",               \
    "NCCL's own; read, not set: not 0 makes NCCL communicators take the bucket size for ranks without peer " \
    "links")

typedef enum cg_param_kind {
  CG_PARAM_SECONDS,         /* a positive decimal number up to 1e9 ("30", "0.5", "1e3"; no sign or blank) */
  CG_PARAM_SWITCH,          /* 0/off/no/false or 1/on/yes/true, any case */
  CG_PARAM_BYTES,           /* digits, then optional K, M or G (powers of 1024), B or iB */
  CG_PARAM_BYTES_OR_NEVER,  /* the same, or "never" (SIZE_MAX) */
  CG_PARAM_ORDINAL,         /* a non-negative integer up to INT_MAX (trailing blanks allowed) */
  CG_PARAM_PATH,            /* any non-empty text: never bad */
} cg_param_kind_t;

typedef enum cg_param {
#define CG_PARAM_ENUM(id, variable, kind, takes, example, does) id,
  CG_PARAM_LIST(CG_PARAM_ENUM)
#undef CG_PARAM_ENUM
  CG_PARAM_COUNT
} cg_param_t;

/* The table's columns: the variable's name ("CG_TIMEOUT"), its kind, what it
 * takes ("seconds > 0"), a good value ("30") and what it does. */
const char *cg_param_name(cg_param_t param);
cg_param_kind_t cg_param_kind(cg_param_t param);
const char *cg_param_takes(cg_param_t param);
const char *cg_param_example(cg_param_t param);
const char *cg_param_does(cg_param_t param);

/* The raw text: NULL when unset or empty. */
const char *cg_param_text(cg_param_t param);

/* The parsers, one per kind. Each returns
 *   CG_SUCCESS, *out set and *is_set 1: the variable is set and parses
 *     (SWITCH: 0 or 1; BYTES: SIZE_MAX when too large; ORDINAL: up to INT_MAX);
 *   CG_SUCCESS, *out untouched and *is_set 0: unset or empty;
 *   CG_ERR_INVALID_ARGUMENT, *out untouched and *is_set 0: set to something
 *     else. The detail (cg_fail) reads "<where>: environment variable
 *     CG_TIMEOUT='abc' is not seconds > 0 (unset it or give e.g. 30)".
 * is_set may be NULL. `where` names the public call that reads the variable
 * ("cg_compile"); callers with no way to return a status (a getter, a
 * background thread) pass NULL: the same line then goes to stderr instead,
 * once per variable and process, and cg_error_last() is left alone; they
 * treat the value as unset. */
cg_status_t cg_param_seconds(double *out, int *is_set, cg_param_t param, const char *where);
cg_status_t cg_param_switch(int *out, int *is_set, cg_param_t param, const char *where);
cg_status_t cg_param_bytes(size_t *out, int *is_set, cg_param_t param, const char *where);
cg_status_t cg_param_ordinal(int *out, int *is_set, cg_param_t param, const char *where);

/* Whichever kind the variable is: CG_SUCCESS when it is unset or parses,
 * else the parser's failure (as above). For callers that validate up front
 * (before a collective step) and for tools that list the variables. */
cg_status_t cg_param_check(cg_param_t param, const char *where);

#endif
