/* An allreduce's piece the chunked way (reduce_chunked.c), in the state
 * of the reductions through the slots (reduce_tree.h): allreduce_shm.c
 * sends its pieces this way from WEFT_SHM_CHUNK_MIN bytes on 4 or more
 * ranks, shm_chunked every piece. */
#ifndef WEFT_COLL_SHM_REDUCE_CHUNKED_H
#define WEFT_COLL_SHM_REDUCE_CHUNKED_H

#include "coll/shm/reduce_tree.h"

/* allreduce_shm.c chunks its pieces from WEFT_SHM_CHUNK_MIN bytes only on
 * at least this many ranks (with fewer the extra flag round costs more
 * than the reduction work it spreads: 2 ranks measured on 2 cores). */
#define WEFT_SHM_CHUNKED_RANKS 4

/* Sets this rank's chunk of the current piece (x->off, x->len), after
 * weft_shm_reduce_set_piece. */
void weft_shm_chunked_set(weft_shm_reduce_t *x);
/* Runs the current piece from its phase 1 and ends it: every rank writes
 * its input, reduces its chunk across all slots in rank order, all copy
 * the chunks out. 1 / 0 / < 0 as a polling step. */
int weft_shm_chunked_piece(weft_sched_t *s, weft_shm_reduce_t *x);

#endif
