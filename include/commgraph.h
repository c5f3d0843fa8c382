/* commgraph: record one iteration's communication as a graph, check it on every
 * rank, and replay it. Umbrella header; functions that take MPI types are in
 * commgraph/mpi.h, those that take CUDA types in commgraph/cuda.h. */
#ifndef COMMGRAPH_H
#define COMMGRAPH_H

#include "commgraph/config.h"
#include "commgraph/status.h"
#include "commgraph/types.h"
#include "commgraph/comm.h"
#include "commgraph/graph.h"
#include "commgraph/plan.h"
#include "commgraph/arena.h"

#endif
