/* Where a rank sits on its node: which GPU it takes, which NUMA node and CPUs
 * are near that GPU, pinned host memory placed there, and a description of
 * the machine for cginfo. The hwloc parts are compiled only when CMake found
 * hwloc (CG_HAVE_HWLOC), the CUDA parts only with CG_HAVE_CUDA; without them
 * every function still links and answers "unknown" or CG_ERR_UNSUPPORTED.
 *
 * NUMA node numbers here are operating-system indexes (hwloc's os_index, the
 * N of /sys/devices/system/node/nodeN, what numactl and nvidia-smi topo
 * print), not hwloc's logical indexes: they are what a user can check
 * against other tools. */
#ifndef CG_BACKENDS_TOPO_H
#define CG_BACKENDS_TOPO_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>

#include "commgraph/status.h"

/* This rank's index among the ranks of `comm` on the same node, and how many
 * there are (MPI_COMM_TYPE_SHARED). Collective over `comm`. */
cg_status_t cg_topo_local_rank(int *local_rank, int *local_size, MPI_Comm comm);

/* The CUDA device this rank should use: the ordinal in environment variable
 * CG_DEVICE when set, otherwise local rank modulo the number of devices this
 * process sees. Collective over `comm` even when CG_DEVICE is set, so ranks
 * that differ in their environment still make the same MPI calls.
 * CG_ERR_UNSUPPORTED without a CUDA device or without CUDA in the build;
 * CG_ERR_INVALID_ARGUMENT when CG_DEVICE is not a device of this process. */
cg_status_t cg_topo_device_for_local_rank(int *device, MPI_Comm comm);

/* The NUMA node (OS index) nearest CUDA device `device`, found from its PCI
 * bus id in hwloc's topology; the lowest one when the device's locality spans
 * several nodes. -1 when unknown: no hwloc or CUDA in the build, no such
 * device, or hwloc does not list it. */
int cg_topo_gpu_numa_node(int device);

/* `bytes` of pinned host memory mapped into the device address space
 * (portable: usable from every device), placed on the NUMA node(s) near
 * `device` when hwloc can bind it there, otherwise where cudaHostAlloc puts
 * it. bytes == 0 gives *out = NULL and success. Free with cg_topo_host_free
 * (the allocation path is remembered by address). */
cg_status_t cg_topo_host_alloc(void **out, size_t bytes, int device);
/* Frees memory from cg_topo_host_alloc; NULL is ignored. `bytes` must be what
 * was asked for. */
void cg_topo_host_free(void *p, size_t bytes);

/* Binds the calling thread to the CPUs near `device` (those of the GPU's
 * locality that this process may run on). *bound is 1 when it did, 0 when it
 * did nothing and returned success: no hwloc or CUDA in the build, locality
 * unknown, or the locality shares no CPU with the process's binding (the
 * launcher placed the rank elsewhere; its CPUs are left as they are).
 * CG_ERR_UNSUPPORTED when the operating system refuses the binding. */
cg_status_t cg_topo_bind_thread_near(int *bound, int device);

/* Prints the machine: hwloc version, counts of packages, NUMA nodes, cores
 * and PUs, each CUDA device with its PCI bus id, NUMA node(s) and local CPUs,
 * and each network and OpenFabrics device with its NUMA node(s). */
void cg_topo_describe(FILE *f);

#endif
