/* Node topology: local rank, device choice, NUMA placement, thread binding
 * (see topology.h). hwloc's topology is loaded once per process and kept: loading
 * it with PCI devices reads much of sysfs (tens of milliseconds), and
 * allocations and bindings need it again each time. */
#include "topology.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "commgraph/config.h"
#include "error.h"
#include "param.h"
#include "mpi/mpi_backend.h"

#if CG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_check.h"
#endif
#if defined(CG_HAVE_HWLOC) && CG_HAVE_HWLOC
#include <hwloc.h>
#define TOPO_HWLOC 1
#else
#define TOPO_HWLOC 0
#endif

/* ---- local rank and device */

cg_status_t cg_topo_local_rank(int *local_rank, int *local_size, MPI_Comm comm) {
  cg_status_t st = CG_SUCCESS;
  MPI_Comm node = MPI_COMM_NULL;
  int rank = 0, err;
  if (!local_rank || !local_size) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_topo_local_rank: NULL output");
  if (comm == MPI_COMM_NULL) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_topo_local_rank: MPI_COMM_NULL");
  if ((err = MPI_Comm_rank(comm, &rank)) != MPI_SUCCESS) return cg_mpi_fail(err, "cg_topo_local_rank: MPI_Comm_rank");
  /* key = rank in comm: local ranks keep the order of the ranks in comm */
  if ((err = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node)) != MPI_SUCCESS) {
    node = MPI_COMM_NULL;
    st = cg_mpi_fail(err, "cg_topo_local_rank: MPI_Comm_split_type");
    goto out;
  }
  /* the split is ours (`comm` keeps its own handler) */
  if ((st = cg_mpi_errors_return(node, "cg_topo_local_rank: the node's communicator")) != CG_SUCCESS) goto out;
  if ((err = MPI_Comm_rank(node, local_rank)) != MPI_SUCCESS ||
      (err = MPI_Comm_size(node, local_size)) != MPI_SUCCESS)
    st = cg_mpi_fail(err, "cg_topo_local_rank: the node's communicator");
out:
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  return st;
}

#if CG_HAVE_CUDA
/* The status a failed CUDA call maps to: a missing GPU or driver is a
 * limit of this machine, not a fault. */
static cg_status_t cuda_status(cudaError_t err) {
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorNotSupported:
      return CG_ERR_UNSUPPORTED;
    case cudaErrorInvalidDevice: return CG_ERR_INVALID_ARGUMENT;
    case cudaErrorMemoryAllocation: return CG_ERR_NO_MEMORY;
    default: return CG_ERR_BACKEND;
  }
}
#endif

cg_status_t cg_topo_device_for_local_rank(int *device, MPI_Comm comm) {
  int local_rank = 0, local_size = 0;
  if (!device) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_topo_device_for_local_rank: NULL output");
  /* first, and on every path: it is collective */
  cg_status_t st = cg_topo_local_rank(&local_rank, &local_size, comm);
  if (st != CG_SUCCESS) return st;
#if CG_HAVE_CUDA
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError(); /* not sticky: leave no error behind for the caller's next check */
    return cg_fail_cuda_as(CG_ERR_UNSUPPORTED, err, "cudaGetDeviceCount",
                           "cg_topo_device_for_local_rank: no usable CUDA device");
  }
  if (count <= 0)
    return cg_fail(CG_ERR_UNSUPPORTED, "cg_topo_device_for_local_rank: this process sees no CUDA device");
  int chosen = -1, set = 0;
  st = cg_param_ordinal(&chosen, &set, CG_PARAM_DEVICE, "cg_topo_device_for_local_rank");
  if (st != CG_SUCCESS) return st;
  if (set) {
    if (chosen >= count)
      return cg_fail(CG_ERR_INVALID_ARGUMENT,
                     "cg_topo_device_for_local_rank: environment variable CG_DEVICE='%s' is not a device ordinal "
                     "of this process (0 to %d)", cg_param_text(CG_PARAM_DEVICE), count - 1);
    *device = chosen;
    return CG_SUCCESS;
  }
  *device = local_rank % count;
  return CG_SUCCESS;
#else
  return cg_fail(CG_ERR_UNSUPPORTED, "cg_topo_device_for_local_rank: commgraph was built without CUDA");
#endif
}

/* ---- hwloc: the topology and a GPU's locality */

#if TOPO_HWLOC
static hwloc_topology_t topology; /* NULL when it could not be loaded */
static once_flag topology_once = ONCE_FLAG_INIT;

static void load_topology(void) {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0) return;
  /* GPUs and NICs are PCI and OS devices, which hwloc leaves out by default;
   * "important" keeps those and drops bridges and uninteresting devices */
  if (hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 || hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    return;
  }
  topology = t;
}

/* Loaded once and never destroyed: hwloc allows concurrent reads and
 * bindings, and memory from hwloc_alloc_membind may outlive any caller. */
static hwloc_topology_t the_topology(void) {
  call_once(&topology_once, load_topology);
  return topology;
}

/* The smallest non-I/O object above I/O object `io`, whose CPUs and NUMA
 * nodes are the device's locality; NULL when that locality is not known. On
 * a machine of several NUMA nodes hwloc hangs a device whose node the kernel
 * does not know (numa_node -1, common in virtual machines) on the root:
 * "every CPU" is then no locality at all. */
static hwloc_obj_t locality_of(hwloc_topology_t t, hwloc_obj_t io) {
  hwloc_obj_t near = io ? hwloc_get_non_io_ancestor_obj(t, io) : NULL;
  if (!near || !near->cpuset || !near->nodeset || hwloc_bitmap_iszero(near->nodeset)) return NULL;
  hwloc_const_nodeset_t all = hwloc_topology_get_topology_nodeset(t);
  if (hwloc_bitmap_weight(all) > 1 && hwloc_bitmap_isincluded(all, near->nodeset)) return NULL;
  return near;
}
#endif

#if TOPO_HWLOC && CG_HAVE_CUDA
/* hwloc's PCI object for CUDA device `device`, NULL if unknown. The bus id
 * names the device whatever CUDA_VISIBLE_DEVICES renumbered. */
static hwloc_obj_t gpu_pci_object(hwloc_topology_t t, int device) {
  char busid[64];
  if (!t || device < 0) return NULL;
  cudaError_t err = cudaDeviceGetPCIBusId(busid, (int)sizeof busid, device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  return hwloc_get_pcidev_by_busidstring(t, busid);
}

static hwloc_obj_t gpu_locality(hwloc_topology_t t, int device) { return locality_of(t, gpu_pci_object(t, device)); }
#endif

int cg_topo_gpu_numa_node(int device) {
#if TOPO_HWLOC && CG_HAVE_CUDA
  if (device < 0) return -1;
  hwloc_obj_t near = gpu_locality(the_topology(), device);
  /* nodesets are indexed by OS index */
  return near ? hwloc_bitmap_first(near->nodeset) : -1;
#else
  (void)device;
  return -1;
#endif
}

/* ---- pinned host memory near a GPU */

#if CG_HAVE_CUDA
/* Where each block came from, so the free takes the same path: hwloc's
 * mapping registered with CUDA, or cudaHostAlloc. A table rather than a
 * header in front of the block: cudaHostRegister and hwloc_free want the
 * page-aligned address hwloc returned. */
typedef struct host_block {
  void *p;
  size_t bytes;
  int registered; /* hwloc_alloc_membind + cudaHostRegister */
} host_block_t;

static mtx_t blocks_lock;
static once_flag blocks_once = ONCE_FLAG_INIT;
static host_block_t *blocks;
static size_t n_blocks, blocks_cap;

static void init_blocks_lock(void) { mtx_init(&blocks_lock, mtx_plain); }

static int remember_block(void *p, size_t bytes, int registered) {
  int ok = 1;
  call_once(&blocks_once, init_blocks_lock);
  mtx_lock(&blocks_lock);
  if (n_blocks == blocks_cap) {
    size_t cap = blocks_cap ? 2 * blocks_cap : 16;
    host_block_t *grown = realloc(blocks, cap * sizeof *grown);
    if (grown) {
      blocks = grown;
      blocks_cap = cap;
    } else {
      ok = 0;
    }
  }
  if (ok) blocks[n_blocks++] = (host_block_t){.p = p, .bytes = bytes, .registered = registered};
  mtx_unlock(&blocks_lock);
  return ok;
}

/* Removes p's entry into *out; 0 when p is not one of ours. */
static int forget_block(host_block_t *out, const void *p) {
  int found = 0;
  call_once(&blocks_once, init_blocks_lock);
  mtx_lock(&blocks_lock);
  for (size_t i = 0; i < n_blocks; i++) {
    if (blocks[i].p != p) continue;
    *out = blocks[i];
    blocks[i] = blocks[--n_blocks];
    found = 1;
    break;
  }
  if (n_blocks == 0) { /* let a leak checker see an empty table as nothing */
    free(blocks);
    blocks = NULL;
    blocks_cap = 0;
  }
  mtx_unlock(&blocks_lock);
  return found;
}

static void release_block(const host_block_t *b) {
  if (b->registered) {
#if TOPO_HWLOC
    cudaHostUnregister(b->p);
    hwloc_free(the_topology(), b->p, b->bytes);
#endif
  } else {
    cudaFreeHost(b->p);
  }
}

#if TOPO_HWLOC
/* Pages bound to the GPU's NUMA node(s) and pinned there; NULL when hwloc
 * cannot place them (no topology, locality unknown, binding refused) or CUDA
 * cannot pin them, and the caller falls back to cudaHostAlloc. */
static void *alloc_near(size_t bytes, int device) {
  hwloc_topology_t t = the_topology();
  hwloc_obj_t near = gpu_locality(t, device);
  if (!near) return NULL;
  /* STRICT: memory that is not where we asked is no better than
   * cudaHostAlloc's, which also knows how to pin on every platform */
  void *p = hwloc_alloc_membind(t, bytes, near->nodeset, HWLOC_MEMBIND_BIND,
                                HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT);
  if (!p) return NULL;
  /* registering pins, so every page is faulted in now, on the bound node */
  if (cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped) != cudaSuccess) {
    cudaGetLastError();
    hwloc_free(t, p, bytes);
    return NULL;
  }
  return p;
}
#endif
#endif

cg_status_t cg_topo_host_alloc(void **out, size_t bytes, int device) {
  if (!out) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_topo_host_alloc: NULL output");
  *out = NULL;
  if (bytes == 0) return CG_SUCCESS;
#if CG_HAVE_CUDA
  cg_status_t st = CG_SUCCESS;
  host_block_t b = {.bytes = bytes};
  int previous = -1;
  /* on the device asked for: CUDA makes the calling thread's current device's
   * context, and a rank should not open one on GPU 0 it never uses */
  const char *call = "cudaGetDevice";
  cudaError_t err = cudaGetDevice(&previous);
  if (err == cudaSuccess) {
    call = "cudaSetDevice";
    err = cudaSetDevice(device);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    previous = -1;
    st = cg_fail_cuda_as(cuda_status(err), err, call, "cg_topo_host_alloc: %zu bytes for device %d", bytes, device);
    goto out;
  }
#if TOPO_HWLOC
  if ((b.p = alloc_near(bytes, device))) b.registered = 1;
#endif
  if (!b.p) {
    err = cudaHostAlloc(&b.p, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
    if (err != cudaSuccess) {
      cudaGetLastError();
      b.p = NULL;
      st = cg_fail_cuda_as(cuda_status(err), err, "cudaHostAlloc", "cg_topo_host_alloc: %zu bytes for device %d",
                           bytes, device);
      goto out;
    }
  }
  if (!remember_block(b.p, bytes, b.registered)) {
    release_block(&b);
    st = cg_fail(CG_ERR_NO_MEMORY, "cg_topo_host_alloc: recording the allocation");
    goto out;
  }
  *out = b.p;
out:
  if (previous >= 0) cudaSetDevice(previous);
  return st;
#else
  (void)device;
  return cg_fail(CG_ERR_UNSUPPORTED, "cg_topo_host_alloc: commgraph was built without CUDA");
#endif
}

void cg_topo_host_free(void *p, size_t bytes) {
  /* the size recorded at allocation is what gets freed; `bytes` is the
   * caller's copy of it */
  (void)bytes;
  if (!p) return;
#if CG_HAVE_CUDA
  host_block_t b;
  if (forget_block(&b, p)) release_block(&b);
#endif
}

/* ---- binding a thread near a GPU */

cg_status_t cg_topo_bind_thread_near(int *bound, int device) {
  if (!bound) return cg_fail(CG_ERR_INVALID_ARGUMENT, "cg_topo_bind_thread_near: NULL output");
  *bound = 0;
#if TOPO_HWLOC && CG_HAVE_CUDA
  cg_status_t st = CG_SUCCESS;
  hwloc_topology_t t = the_topology();
  hwloc_obj_t near = gpu_locality(t, device);
  hwloc_bitmap_t set = NULL;
  if (!near) return CG_SUCCESS;
  if (!(set = hwloc_bitmap_alloc())) return cg_fail(CG_ERR_NO_MEMORY, "cg_topo_bind_thread_near: a CPU set");
  /* within the CPUs this thread may use now: a launcher that gave the rank
   * some cores (mpiexec -bind-to) meant the rank to stay on them */
  if (hwloc_get_cpubind(t, set, HWLOC_CPUBIND_THREAD) != 0)
    hwloc_bitmap_copy(set, hwloc_topology_get_allowed_cpuset(t));
  hwloc_bitmap_and(set, set, near->cpuset);
  if (hwloc_bitmap_iszero(set)) goto out;
  if (hwloc_set_cpubind(t, set, HWLOC_CPUBIND_THREAD) != 0) {
    char *cpus = NULL;
    int saved = errno;
    hwloc_bitmap_list_asprintf(&cpus, set);
    st = cg_fail(CG_ERR_UNSUPPORTED, "cg_topo_bind_thread_near: binding the thread to CPUs %s near device %d: %s",
                 cpus ? cpus : "?", device, strerror(saved));
    free(cpus);
    goto out;
  }
  *bound = 1;
out:
  hwloc_bitmap_free(set);
  return st;
#else
  (void)device;
  return CG_SUCCESS;
#endif
}

/* ---- describing the machine */

#if TOPO_HWLOC
/* "NUMA node 0", "NUMA nodes 0-1" or "NUMA node unknown" for the locality of
 * I/O object `io`, and its CPUs when asked. */
static void print_locality(FILE *f, hwloc_topology_t t, hwloc_obj_t io, int with_cpus) {
  hwloc_obj_t near = locality_of(t, io);
  char *nodes = NULL, *cpus = NULL;
  if (!near) {
    fprintf(f, "NUMA node unknown");
    return;
  }
  hwloc_bitmap_list_asprintf(&nodes, near->nodeset);
  fprintf(f, "NUMA node%s %s", hwloc_bitmap_weight(near->nodeset) > 1 ? "s" : "", nodes ? nodes : "?");
  if (with_cpus) {
    hwloc_bitmap_list_asprintf(&cpus, near->cpuset);
    fprintf(f, ", CPUs %s", cpus ? cpus : "?");
  }
  free(nodes);
  free(cpus);
}
#endif

static void describe_gpus(FILE *f) {
#if CG_HAVE_CUDA
  int count = 0, driver = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    cudaDriverGetVersion(&driver);
    char text[512];
    fprintf(f, "CUDA devices: 0 (%s: %s)\n", driver ? "cudaGetDeviceCount" : "no CUDA driver",
            cg_cuda_error_text(err, text, sizeof text));
    return;
  }
  fprintf(f, "CUDA devices: %d\n", count);
  for (int d = 0; d < count; d++) {
    struct cudaDeviceProp prop;
    char busid[64] = "?";
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      cudaGetLastError();
      snprintf(prop.name, sizeof prop.name, "?");
    }
    if (cudaDeviceGetPCIBusId(busid, (int)sizeof busid, d) != cudaSuccess) {
      cudaGetLastError();
      snprintf(busid, sizeof busid, "?");
    }
    fprintf(f, "  gpu %d: %s, PCI %s, ", d, prop.name, busid);
#if TOPO_HWLOC
    hwloc_topology_t t = the_topology();
    print_locality(f, t, t ? gpu_pci_object(t, d) : NULL, 1);
#else
    fprintf(f, "NUMA node unknown (no hwloc)");
#endif
    fprintf(f, "\n");
  }
#else
  fprintf(f, "CUDA devices: n/a (built without CUDA)\n");
#endif
}

#if TOPO_HWLOC
static void describe_network(FILE *f, hwloc_topology_t t) {
  int count = 0;
  hwloc_obj_t o = NULL;
  while ((o = hwloc_get_next_osdev(t, o)))
    count += o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK || o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
  fprintf(f, "network devices: %d\n", count);
  while ((o = hwloc_get_next_osdev(t, o))) {
    int fabric = o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
    if (!fabric && o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK) continue;
    fprintf(f, "  %s (%s", o->name ? o->name : "?", fabric ? "openfabrics" : "network");
    if (o->parent && o->parent->type == HWLOC_OBJ_PCI_DEVICE) {
      const struct hwloc_pcidev_attr_s *pci = &o->parent->attr->pcidev;
      fprintf(f, ", PCI %04x:%02x:%02x.%x", (unsigned)pci->domain, (unsigned)pci->bus, (unsigned)pci->dev,
              (unsigned)pci->func);
    }
    fprintf(f, "), ");
    print_locality(f, t, o, 0);
    fprintf(f, "\n");
  }
}

static void print_api_version(FILE *f, unsigned v) { fprintf(f, "%u.%u.%u", v >> 16, (v >> 8) & 0xffu, v & 0xffu); }
#endif

void cg_topo_describe(FILE *f) {
  if (!f) return;
#if TOPO_HWLOC
  hwloc_topology_t t = the_topology();
  fprintf(f, "hwloc: %s (API ", HWLOC_VERSION);
  print_api_version(f, HWLOC_API_VERSION);
  fprintf(f, " at build time, ");
  print_api_version(f, hwloc_get_api_version());
  fprintf(f, " at run time)\n");
  if (t)
    fprintf(f, "machine: %d packages, %d NUMA nodes, %d cores, %d PUs\n",
            hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE), hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE),
            hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE), hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU));
  else
    fprintf(f, "machine: hwloc could not load the topology\n");
#else
  fprintf(f, "hwloc: not built in (no NUMA nodes, CPU sets or network devices)\n");
#endif
  describe_gpus(f);
#if TOPO_HWLOC
  if (t) describe_network(f, t);
#endif
}
