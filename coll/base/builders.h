/* Builders that several base algorithms share (besides the ring and Bruck
 * ones in coll/coll.h): the fold of any number of ranks onto a power of two
 * (pow2_fold.c), and reduce-scatter by recursive halving with its mirror,
 * allgather by recursive doubling, over the ranks that fold leaves
 * (recursive_halving.c). Like any builder they add steps to a schedule and
 * return a status; buffers must outlive the schedule. */
#ifndef WEFT_COLL_BASE_BUILDERS_H
#define WEFT_COLL_BASE_BUILDERS_H

#include "coll/coll.h"

/* n ranks folded onto p, the largest power of two <= n. Counted from root,
 * the first 2(n - p) ranks form pairs (2i, 2i + 1): one hands its data to
 * the other, the survivor, which stands for both; the p survivors and the
 * ranks beyond the pairs run a power-of-two algorithm as ranks 0..p-1, and
 * each survivor may hand the result back at the end. */
typedef struct weft_coll_fold {
    int n, p, rem, root;
    int odd_survives; /* the odd rank of a pair survives (else the even one) */
    int newrank;      /* this rank among the p; -1 if it hands its data over */
    int partner;      /* comm rank of the other rank of this rank's pair; -1 beyond the pairs */
} weft_coll_fold_t;

void weft_coll_fold_init(weft_coll_fold_t *f, int n, int rank, int root, int odd_survives);
/* The first rank, counted from root, that survivor i stands for (i == p: n). */
int weft_coll_fold_first(const weft_coll_fold_t *f, int i);
/* The comm rank of survivor i. */
int weft_coll_fold_rank(const weft_coll_fold_t *f, int i);
/* The pairs' step, moving data: a rank that hands over sends `bytes` of
 * send, its survivor receives them into recv; both end the round. Nothing
 * beyond the pairs. */
int weft_coll_fold_in(weft_sched_t *s, const weft_coll_fold_t *f, const void *send, void *recv, size_t bytes);
/* The pairs' step for a reduction of count elements: a rank that hands over
 * sends mine; a survivor leaves mine op partner's in acc, receiving into
 * tmp when mine is acc itself, else into acc (then acc = partner's op mine,
 * no copy). Both end the round. */
int weft_coll_fold_in_reduce(weft_sched_t *s, const weft_coll_fold_t *f, const weft_coll_args_t *a, const void *mine,
                             char *acc, char *tmp, size_t count);
/* Handing the result back: a survivor sends `bytes` of buf to its pair,
 * starting a new round (buf is what the rounds before produced); a rank
 * that handed over receives into buf. The round stays open for local steps.
 * Nothing beyond the pairs. */
int weft_coll_fold_out(weft_sched_t *s, const weft_coll_fold_t *f, void *buf, size_t bytes);

/* The p segments (elements) the halving and the doubling run on, as p + 1
 * offsets in schedule scratch; NULL when out of memory (the error is set,
 * naming alg). Even: count elements cut into p (weft_coll_block, the larger
 * first). By rank: segment i holds the blocks of the ranks survivor i stands
 * for, rank j's block starting at rank_off[j] (n + 1 offsets), or at
 * j * count when rank_off is NULL. */
size_t *weft_coll_even_segments(weft_sched_t *s, int p, size_t count, const char *alg);
size_t *weft_coll_fold_segments(weft_sched_t *s, const weft_coll_fold_t *f, const size_t *rank_off, size_t count,
                                const char *alg);

/* Reduce-scatter by recursive halving among the survivors of f (newrank >=
 * 0): step k exchanges half of the current range of segments with the
 * survivor at distance p / 2^k and reduces the half kept. src is this rank's
 * vector (it may be acc); acc takes the reduced halves; tmp holds the larger
 * half of the vector. Ends with segment newrank of acc reduced over all n
 * ranks and finalised, and the round ended. */
int weft_coll_reduce_scatter_halving_build(weft_sched_t *s, const weft_coll_args_t *a, const weft_coll_fold_t *f,
                                           const size_t *seg, const char *src, char *acc, char *tmp);
/* Allgather by recursive doubling among the survivors of f, the halving's
 * exchanges backwards: from segment newrank of buf, step k swaps the 2^k
 * segments gathered so far with the survivor at distance 2^k, in place.
 * The last step's round stays open for local steps (copies of the result). */
int weft_coll_allgather_doubling_build(weft_sched_t *s, const weft_coll_fold_t *f, const size_t *seg, size_t esize,
                                       char *buf);

#endif
