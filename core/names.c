#include "commgraph/comm.h"
#include "commgraph/types.h"

size_t cg_dtype_size(cg_dtype_t dtype) {
  switch (dtype) {
#define CG_DTYPE_SIZE_CASE(name, bytes, text) \
  case name:                                  \
    return bytes;
    CG_DTYPE_LIST(CG_DTYPE_SIZE_CASE)
#undef CG_DTYPE_SIZE_CASE
    case CG_DTYPE_COUNT:
      break;
  }
  return 0;
}

const char *cg_dtype_name(cg_dtype_t dtype) {
  switch (dtype) {
#define CG_DTYPE_NAME_CASE(name, bytes, text) \
  case name:                                  \
    return text;
    CG_DTYPE_LIST(CG_DTYPE_NAME_CASE)
#undef CG_DTYPE_NAME_CASE
    case CG_DTYPE_COUNT:
      break;
  }
  return "unknown";
}

const char *cg_redop_name(cg_redop_t op) {
  switch (op) {
#define CG_REDOP_NAME_CASE(name, text) \
  case name:                           \
    return text;
    CG_REDOP_LIST(CG_REDOP_NAME_CASE)
#undef CG_REDOP_NAME_CASE
    case CG_REDOP_COUNT:
      break;
  }
  return "unknown";
}

const char *cg_node_kind_name(cg_node_kind_t kind) {
  switch (kind) {
#define CG_KIND_NAME_CASE(name, text) \
  case name:                          \
    return text;
    CG_NODE_KIND_LIST(CG_KIND_NAME_CASE)
#undef CG_KIND_NAME_CASE
    case CG_NODE_KIND_COUNT:
      break;
  }
  return "unknown";
}

const char *cg_backend_kind_name(cg_backend_kind_t kind) {
  switch (kind) {
#define CG_BACKEND_NAME_CASE(name, text) \
  case name:                             \
    return text;
    CG_BACKEND_LIST(CG_BACKEND_NAME_CASE)
#undef CG_BACKEND_NAME_CASE
    case CG_BACKEND_COUNT:
      break;
  }
  return "unknown";
}
