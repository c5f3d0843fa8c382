/* Why a node is, or is not, in the bucket of the operation before it on its
 * communicator: decided by the fusion pass (sched/compile/fusion.c), kept per
 * node in the plan (plan->fuse_why) and drawn in its DOT. */
#ifndef CG_SCHED_FUSE_WHY_H
#define CG_SCHED_FUSE_WHY_H

#define CG_FUSE_REASONS(X)                                                                      \
  X(CG_FUSE_JOINED, "joined the bucket before it")                                              \
  X(CG_FUSE_FIRST, "first operation on its communicator")                                       \
  X(CG_FUSE_OFF, "fusion is off")                                                               \
  X(CG_FUSE_NOT_FUSIBLE, "its kind is never fused")                                             \
  X(CG_FUSE_DIFFERS, "the operation before it differs (kind, data type, reduction or root)")    \
  X(CG_FUSE_FULL, "the bucket before it would exceed the bucket size")                          \
  X(CG_FUSE_DEPENDS, "it depends on a node of the bucket before it")                            \
  X(CG_FUSE_FEEDS, "the operation before it feeds communication on another communicator")     \
  X(CG_FUSE_WAITED, "its inputs were not ready when the bucket before it had to run")            \
  X(CG_FUSE_RANKS, "another rank could not fuse it")                                           \
  X(CG_FUSE_OVERLAP, "the bucket before it waits for compute and reached its overlap size")               \
  X(CG_FUSE_TUNED, "with the measured ready times and costs, a new bucket here finishes sooner")

typedef enum cg_fuse_why {
#define CG_FUSE_ENUM(name, text) name,
  CG_FUSE_REASONS(CG_FUSE_ENUM)
#undef CG_FUSE_ENUM
} cg_fuse_why_t;

const char *cg_fuse_why_text(cg_fuse_why_t why);

#endif
