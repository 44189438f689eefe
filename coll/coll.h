/* The collective module: algorithms are schedules built over pt2pt. The
 * registry and selection table arrive with the collectives work; for now
 * the module provides the runtime's internal services (communicator
 * creation needs an allgather). */
#ifndef WEFT_COLL_H
#define WEFT_COLL_H

#include "src/schedule.h"
#include "src/weft_internal.h"

/* coll/base/allgather_bruck.c: adds Bruck's allgather of `block` bytes per
 * rank to s (ceil(log2 n) rounds, n * block bytes of scratch). */
int weft_coll_allgather_bruck_build(weft_sched_t *s, const void *send, void *recv, size_t block);

#endif
