/* commgraph: record one iteration's communication as a graph, check it on every
 * rank, and replay it. Umbrella header; CUDA-typed functions are in
 * commgraph/cuda.h. */
#ifndef COMMGRAPH_H
#define COMMGRAPH_H

#include "commgraph/config.h"
#include "commgraph/status.h"
#include "commgraph/types.h"
#include "commgraph/comm.h"
#include "commgraph/graph.h"

#endif
