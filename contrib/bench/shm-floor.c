/* shm-floor: the hardware floor of shared-memory flag protocols, without
 * weft. n processes (forked, each bound to CPU first + i) share one
 * anonymous mapping and run a protocol back to back; rank 0 reports the
 * average time per call over every rank's average (as the OSU tests do).
 * It answers "how much of weft's time is the protocol's cache-line
 * transfers and how much is weft's own path" for coll/shm, and compares
 * protocols before one goes into coll/shm.
 *
 *   shm-floor [-n ranks] [-i iters] [-r radix] [-f first_cpu] [-s cpu_step] [-b bytes]
 *             [-p prefetch locality 0-3, -1: none] [-B tree|allread] PROTOCOL...
 *
 * -B: the barrier between the calls of the -osu and arb-* protocols,
 * outside the timed part (default tree; allread is coll/shm's barrier).
 *
 * Protocols (each line: name and median of 3 runs, us per call):
 *   pingpong        ranks 0 and 1: round trip of one flag each way
 *   tree            barrier: arrivals up a radix-r tree, one release line
 *   tree-down       barrier: arrivals up, releases down the same tree
 *   allread         barrier: every rank writes its line, reads all n
 *   dissem          barrier: radix-2 dissemination, ceil(log2 n) rounds
 *   ar-tree         8-byte sum allreduce: partials up the tree in the flag
 *                   line, the root's result read by all (coll/shm's shape)
 *   ar-allread      8-byte sum allreduce: every rank reads all n lines and
 *                   sums them in rank order
 *   ar-allread-osu  ar-allread with a tree barrier after each call, outside
 *                   the timed part (the OSU loop)
 *   ar-tree-osu     ar-tree, the same
 *   arb-allread     ar-allread-osu of -b bytes of floats: up to 48 bytes
 *                   beside the flag, larger in a separate buffer per slot
 *                   (coll/shm's layout), prefetched before the sum
 *   arb-tree        ar-tree-osu of -b bytes the same way (partials up the
 *                   tree, the root's result copied by all)
 *   arb-demote      arb-allread, the writer pushing its payload and flag
 *                   lines to the shared cache with CLDEMOTE (a no-op hint
 *                   on CPUs without it) so readers do not snoop its core
 *   arb-chunked     arb-allread's inputs, then each rank sums its share
 *                   of the lines across all ranks, writes it back over its
 *                   input and raises a second flag; all copy the shares
 *                   (coll/shm's chunked allreduce: two flag rounds, 2/n
 *                   of the data read per rank instead of all of it)
 *   arb-chunked-seen  arb-chunked, each rank's share of a slot fetched as
 *                   soon as its input flag is seen, each share copied out
 *                   as soon as its owner's flag is seen
 *   arb-chunked-ll  arb-chunked on flagged lines (56 bytes and the call's
 *                   number in each): a rank polls its lines of every rank
 *                   instead of n head flags, then writes each summed line
 *                   with the next number; all copy each line as it comes
 *   arb-ll          arb-allread with a flag in every line: 56 bytes of
 *                   payload and the call's number, stored after them, so
 *                   a line's one transfer brings data and flag (readers
 *                   wait for every line, then sum in rank order)
 *   arb-ll-tail     arb-ll, readers waiting for each rank's last line
 *                   first (its stores are ordered: the others are there)
 *   arb-ll-dir      arb-ll, each line written whole with MOVDIR64B (a
 *                   64-byte direct store: no ownership read; x86 CPUs
 *                   with the movdir64b flag)
 *   big-cma-allgather, big-cma-bcast, big-cma-alltoall
 *                   large blocks (-b up to 64 MiB) in each rank's private
 *                   memory, read by the others with process_vm_readv
 *                   (coll/shm's shm_cma: allgather every peer's block from
 *                   the next rank on, bcast rank 0's, alltoall block `me`
 *                   of every peer's), a tree barrier after each call
 *   big-shm-allgather, big-shm-bcast, big-shm-alltoall
 *                   the same blocks in one shared mapping, copied with
 *                   memcpy: the memory's floor for one copy of each byte
 * The arb-* protocols check the sum of the last call; the big-* ones the
 * first and last byte of every block. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 256
typedef struct {
    _Atomic uint64_t seq;
    double val;
    char pad[128 - 16];
} line_t;

/* arb-ll*: 56 bytes of payload and the flag in one cache line */
typedef struct {
    float d[14];
    _Atomic uint64_t seq;
} __attribute__((aligned(64))) ll_line_t;
#define LL_LINES ((4096 + 55) / 56)

typedef struct {
    line_t arrive[MAXR];  /* a rank's arrival / partial */
    line_t release[MAXR]; /* a rank's release (tree-down), rank 0's for tree */
    line_t bar[MAXR];     /* the OSU loop's separate barrier */
    line_t barrel[MAXR];
    line_t slot[MAXR][4]; /* ar-allread: a ring of 4 slots per rank */
    float body[MAXR][4][1024] __attribute__((aligned(4096))); /* arb-*: bodies of up to 4 KiB */
    ll_line_t ll[MAXR][4][LL_LINES];                          /* arb-ll*: the same in flagged lines */
    double result[MAXR];
    pid_t pid[MAXR];       /* big-cma-*: every rank's pid and block address */
    char *src[MAXR];
} shared_t;

static int n = 8, iters = 100000, radix = 8, first = 0, step = 1;
static size_t bytes = 8;
static shared_t *S;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline void wait_ge(_Atomic uint64_t *p, uint64_t v)
{
    while (atomic_load_explicit(p, memory_order_acquire) < v)
        ;
}

static int parent(int v)
{
    int p = 1;
    while ((v / p) % radix == 0)
        p *= radix;
    return v - ((v / p) % radix) * p;
}

/* v's children in the radix tree (coll/shm's order); their number */
static int children(int v, int *kids)
{
    int nk = 0;
    for (long st = 1; st < n && v % (st * radix) == 0; st *= radix)
        for (long j = 1; j < radix && v + j * st < n; j++)
            kids[nk++] = (int)(v + j * st);
    return nk;
}

/* until the seq of line base[r * stride] is >= t for each r in ranks
 * (NULL: 0..count-1): every line loaded, then judged */
static void wait_all(line_t *base, int stride, const int *ranks, int count, uint64_t t)
{
    for (;;) {
        int ok = 1;
        for (int i = 0; i < count; i++)
            ok &= atomic_load_explicit(&base[(ranks ? ranks[i] : i) * stride].seq, memory_order_acquire) >= t;
        if (ok) return;
    }
}

static void wait_children(line_t *lines, int v, uint64_t t)
{
    int kids[MAXR], nk = children(v, kids);
    wait_all(lines, 1, kids, nk, t);
}

static void tree_barrier(line_t *arr, line_t *rel, int me, uint64_t k)
{
    wait_children(arr, me, k);
    if (me == 0) {
        atomic_store_explicit(&rel[0].seq, k, memory_order_release);
        return;
    }
    atomic_store_explicit(&arr[me].seq, k, memory_order_release);
    wait_ge(&rel[0].seq, k);
}

static void proto_tree_down(int me, uint64_t k)
{
    wait_children(S->arrive, me, k);
    if (me != 0) {
        atomic_store_explicit(&S->arrive[me].seq, k, memory_order_release);
        wait_ge(&S->release[parent(me)].seq, k);
    }
    if (me % radix == 0) atomic_store_explicit(&S->release[me].seq, k, memory_order_release);
}

/* every rank raises its line and reads every rank's */
static void allread_barrier(line_t *lines, int me, uint64_t k)
{
    atomic_store_explicit(&lines[me].seq, k, memory_order_release);
    wait_all(lines, 1, NULL, n, k);
}

static void proto_allread(int me, uint64_t k)
{
    allread_barrier(S->arrive, me, k);
}

static void proto_dissem(int me, uint64_t k)
{
    int rounds = 0;
    while ((1 << rounds) < n)
        rounds++;
    for (int j = 0; j < rounds; j++) {
        uint64_t t = (k - 1) * rounds + j + 1;
        atomic_store_explicit(&S->arrive[me].seq, t, memory_order_release);
        wait_ge(&S->arrive[(me - (1 << j) % n + n) % n].seq, t);
    }
}

static double ar_tree(int me, uint64_t k, double x)
{
    /* partial = x + children's partials (in child order), up to 0 */
    int kids[MAXR], nk = children(me, kids);
    uint64_t t = 2 * k + 1;
    wait_all(S->arrive, 1, kids, nk, t);
    double acc = x;
    for (int i = 0; i < nk; i++)
        acc += S->arrive[kids[i]].val;
    if (me == 0) {
        S->release[0].val = acc;
        atomic_store_explicit(&S->release[0].seq, 2 * k + 2, memory_order_release);
        return acc;
    }
    S->arrive[me].val = acc;
    atomic_store_explicit(&S->arrive[me].seq, t, memory_order_release);
    wait_ge(&S->release[0].seq, 2 * k + 2);
    return S->release[0].val;
}

static uint64_t min_done; /* allread: a lower bound of every rank's done */

/* allread's slot k % 4 was last read in call k - 4: waits until every
 * rank's done (its release line) is >= k - 4 */
static void reuse_wait(uint64_t k)
{
    while (k > 4 && min_done < k - 4) {
        uint64_t m = UINT64_MAX;
        for (int r = 0; r < n; r++) {
            uint64_t d = atomic_load_explicit(&S->release[r].seq, memory_order_acquire);
            if (d < m) m = d;
        }
        min_done = m;
    }
}

/* after every rank's input of call k was seen: every rank finished k - 1,
 * and this one finished k */
static void allread_done(int me, uint64_t k)
{
    if (min_done < k - 1) min_done = k - 1;
    atomic_store_explicit(&S->release[me].seq, k, memory_order_relaxed);
}

static double ar_allread(int me, uint64_t k, double x)
{
    reuse_wait(k);
    line_t *mine = &S->slot[me][k % 4];
    mine->val = x;
    atomic_store_explicit(&mine->seq, k, memory_order_release);
    wait_all(&S->slot[0][k % 4], 4, NULL, n, k);
    double acc = 0;
    for (int r = 0; r < n; r++)
        acc += S->slot[r][k % 4].val;
    allread_done(me, k);
    return acc;
}

/* where rank r's payload of slot b lives: beside the flag up to 48 bytes */
static float *payload(int r, int b)
{
    return bytes <= 48 ? (float *)((char *)&S->slot[r][b] + 16) : S->body[r][b];
}

static int hint = 3; /* -p: the prefetch's locality (3: into L1 ... 0: non-temporal), -1: none */

static void prefetch(const void *p, size_t len)
{
    for (size_t i = 0; i < len; i += 64)
        switch (hint) {
        case 3: __builtin_prefetch((const char *)p + i, 0, 3); break;
        case 2: __builtin_prefetch((const char *)p + i, 0, 2); break;
        case 1: __builtin_prefetch((const char *)p + i, 0, 1); break;
        case 0: __builtin_prefetch((const char *)p + i, 0, 0); break;
        default: return;
        }
}

static float out_buf[1024 + 14], in_buf[1024 + 14];

/* o += p over m floats (vectorized, like weft's reductions) */
__attribute__((optimize("O3"))) static void add(float *restrict o, const float *restrict p, size_t m)
{
    for (size_t i = 0; i < m; i++)
        o[i] += p[i];
}

static inline void demote(const void *p, size_t len)
{
#if defined(__x86_64__)
    for (size_t i = 0; i < len; i += 64)
        __asm__ volatile("cldemote %0" : : "m"(*((const volatile char *)p + i)));
#else
    (void)p, (void)len;
#endif
}

static void arb_allread(int me, uint64_t k, int dem)
{
    size_t m = bytes / sizeof(float);
    int b = (int)(k % 4);
    reuse_wait(k);
    memcpy(payload(me, b), in_buf, bytes);
    if (dem) demote(payload(me, b), bytes);
    atomic_store_explicit(&S->slot[me][b].seq, k, memory_order_release);
    if (dem) demote(&S->slot[me][b], 64);
    wait_all(&S->slot[0][b], 4, NULL, n, k);
    if (bytes > 48)
        for (int r = 0; r < n; r++)
            prefetch(payload(r, b), bytes);
    memcpy(out_buf, payload(0, b), bytes);
    for (int r = 1; r < n; r++)
        add(out_buf, payload(r, b), m);
    allread_done(me, k);
}

/* the share of rank r: whole lines of floats [*off, *off + *len) */
static void share(int r, size_t m, size_t *off, size_t *len)
{
    size_t lines = (m + 15) / 16, base = lines / (size_t)n, extra = lines % (size_t)n, ur = (size_t)r;
    size_t l0 = ur * base + (ur < extra ? ur : extra), nl = base + (ur < extra);
    *off = l0 * 16 < m ? l0 * 16 : m;
    *len = nl * 16 < m - *off ? nl * 16 : m - *off;
}

static void arb_chunked(int me, uint64_t k)
{
    size_t m = bytes / sizeof(float), off, len;
    int b = (int)(k % 4);
    reuse_wait(k);
    memcpy(S->body[me][b], in_buf, bytes);
    atomic_store_explicit(&S->slot[me][b].seq, 2 * k + 1, memory_order_release);
    wait_all(&S->slot[0][b], 4, NULL, n, 2 * k + 1);
    share(me, m, &off, &len);
    if (len) {
        for (int r = 0; r < n; r++)
            prefetch(S->body[r][b] + off, len * sizeof(float));
        memcpy(out_buf + off, S->body[0][b] + off, len * sizeof(float));
        for (int r = 1; r < n; r++)
            add(out_buf + off, S->body[r][b] + off, len);
        memcpy(S->body[me][b] + off, out_buf + off, len * sizeof(float));
    }
    atomic_store_explicit(&S->slot[me][b].seq, 2 * k + 2, memory_order_release);
    wait_all(&S->slot[0][b], 4, NULL, n, 2 * k + 2);
    for (int r = 0; r < n; r++) {
        share(r, m, &off, &len);
        if (r != me && len) memcpy(out_buf + off, S->body[r][b] + off, len * sizeof(float));
    }
    allread_done(me, k);
}

/* arb-chunked, each rank's share fetched as soon as its input flag is
 * seen and each share copied out as soon as its owner's flag is seen
 * (coll/shm's chunked allreduce since session 7) */
static void arb_chunked_seen(int me, uint64_t k)
{
    size_t m = bytes / sizeof(float), off, len, moff, mlen;
    int b = (int)(k % 4), left = n;
    unsigned char got[MAXR] = {0};
    reuse_wait(k);
    memcpy(S->body[me][b], in_buf, bytes);
    atomic_store_explicit(&S->slot[me][b].seq, 2 * k + 1, memory_order_release);
    share(me, m, &moff, &mlen);
    while (left)
        for (int r = 0; r < n; r++)
            if (!got[r] && atomic_load_explicit(&S->slot[r][b].seq, memory_order_acquire) >= 2 * k + 1) {
                got[r] = 1;
                left--;
                if (mlen) prefetch(S->body[r][b] + moff, mlen * sizeof(float));
            }
    if (mlen) {
        memcpy(out_buf + moff, S->body[0][b] + moff, mlen * sizeof(float));
        for (int r = 1; r < n; r++)
            add(out_buf + moff, S->body[r][b] + moff, mlen);
        memcpy(S->body[me][b] + moff, out_buf + moff, mlen * sizeof(float));
    }
    atomic_store_explicit(&S->slot[me][b].seq, 2 * k + 2, memory_order_release);
    memset(got, 0, sizeof(got));
    got[me] = 1;
    left = n - 1;
    while (left)
        for (int r = 0; r < n; r++)
            if (!got[r] && atomic_load_explicit(&S->slot[r][b].seq, memory_order_acquire) >= 2 * k + 2) {
                got[r] = 1;
                left--;
                share(r, m, &off, &len);
                if (len) memcpy(out_buf + off, S->body[r][b] + off, len * sizeof(float));
            }
    allread_done(me, k);
}

/* the chunked shape on flagged lines: every line of the input carries the
 * call's number (2k + 1), a rank owns whole lines, polls its lines of
 * every rank (no head flag, no dependent data miss), sums them in rank
 * order and writes the sum over its own input line with 2k + 2; all
 * wait for every line's sum and copy each as it comes */
static void arb_chunked_ll(int me, uint64_t k)
{
    int b = (int)(k % 4), nl = (int)((bytes + 55) / 56);
    int base = nl / n, extra = nl % n, l0 = me * base + (me < extra ? me : extra), cnt = base + (me < extra);
    ll_line_t *mine = S->ll[me][b];
    unsigned char got[LL_LINES] = {0};
    reuse_wait(k);
    for (int j = 0; j < nl; j++) {
        size_t len = bytes - (size_t)j * 56 < 56 ? bytes - (size_t)j * 56 : 56;
        memcpy(mine[j].d, in_buf + j * 14, len);
        atomic_store_explicit(&mine[j].seq, 2 * k + 1, memory_order_release);
    }
    for (;;) {
        int ok = 1;
        for (int r = 0; r < n; r++)
            for (int j = l0; j < l0 + cnt; j++)
                ok &= atomic_load_explicit(&S->ll[r][b][j].seq, memory_order_acquire) >= 2 * k + 1;
        if (ok) break;
    }
    for (int j = l0; j < l0 + cnt; j++) {
        float acc[14];
        memcpy(acc, S->ll[0][b][j].d, 56);
        for (int r = 1; r < n; r++)
            add(acc, S->ll[r][b][j].d, 14);
        memcpy(mine[j].d, acc, 56);
        atomic_store_explicit(&mine[j].seq, 2 * k + 2, memory_order_release);
        size_t len = bytes - (size_t)j * 56 < 56 ? bytes - (size_t)j * 56 : 56;
        memcpy(out_buf + j * 14, acc, len);
        got[j] = 1;
    }
    int left = nl - cnt;
    while (left)
        for (int j = 0; j < nl; j++) {
            int o = j < extra * (base + 1) ? j / (base + 1) : extra + (j - extra * (base + 1)) / (base ? base : 1);
            if (!got[j] && atomic_load_explicit(&S->ll[o][b][j].seq, memory_order_acquire) >= 2 * k + 2) {
                size_t len = bytes - (size_t)j * 56 < 56 ? bytes - (size_t)j * 56 : 56;
                memcpy(out_buf + j * 14, S->ll[o][b][j].d, len);
                got[j] = 1;
                left--;
            }
        }
    allread_done(me, k);
}

/* until lines [j0, nl) of every rank's slot b carry call k: every line
 * loaded, then judged */
static void ll_wait(int b, int j0, int nl, uint64_t k)
{
    for (;;) {
        int ok = 1;
        for (int r = 0; r < n; r++)
            for (int j = j0; j < nl; j++)
                ok &= atomic_load_explicit(&S->ll[r][b][j].seq, memory_order_acquire) >= k;
        if (ok) return;
    }
}

static void arb_ll(int me, uint64_t k, int dir, int tail)
{
    int b = (int)(k % 4), nl = (int)((bytes + 55) / 56);
    ll_line_t *mine = S->ll[me][b];
    reuse_wait(k);
    for (int j = 0; j < nl; j++) {
        size_t len = bytes - (size_t)j * 56 < 56 ? bytes - (size_t)j * 56 : 56;
        if (dir) {
#if defined(__x86_64__)
            ll_line_t line;
            memcpy(line.d, in_buf + j * 14, len);
            atomic_store_explicit(&line.seq, k, memory_order_relaxed);
            __asm__ volatile("movdir64b %1, %0" : : "r"(&mine[j]), "m"(line) : "memory");
#endif
        } else {
            memcpy(mine[j].d, in_buf + j * 14, len);
            atomic_store_explicit(&mine[j].seq, k, memory_order_release);
        }
    }
    if (tail) ll_wait(b, nl - 1, nl, k); /* the last lines first (plain stores land in order) */
    ll_wait(b, 0, nl, k);
    for (int j = 0; j < nl; j++)
        memcpy(out_buf + j * 14, S->ll[0][b][j].d, 56);
    for (int r = 1; r < n; r++)
        for (int j = 0; j < nl; j++)
            add(out_buf + j * 14, S->ll[r][b][j].d, 14);
    allread_done(me, k);
}

static void arb_tree(int me, uint64_t k)
{
    size_t m = bytes / sizeof(float);
    int b = (int)(k % 4), kids[MAXR], nk = children(me, kids);
    /* slot b was read in call k - 4 by the parent (or, at the root, by all):
     * the OSU barrier between calls already orders that */
    uint64_t t = 2 * k + 1;
    wait_all(&S->slot[0][b], 4, kids, nk, t);
    float *mine = payload(me, b);
    if (bytes > 48)
        for (int i = 0; i < nk; i++)
            prefetch(payload(kids[i], b), bytes);
    memcpy(mine, in_buf, bytes);
    for (int i = 0; i < nk; i++) {
        const float *p = payload(kids[i], b);
        for (size_t j = 0; j < m; j++)
            mine[j] += p[j];
    }
    atomic_store_explicit(&S->slot[me][b].seq, me == 0 ? 2 * k + 2 : t, memory_order_release);
    if (me != 0) wait_ge(&S->slot[0][b].seq, 2 * k + 2);
    memcpy(out_buf, payload(0, b), bytes);
}

/* big-*: this rank's source (bcast, allgather: one block; alltoall: n
 * blocks, block j for rank j) and result (n blocks; bcast: one); the
 * shm forms' sources lie in big_shared (rank r's at r * src_bytes). Block
 * j of rank r holds the byte (r * 31 + j) & 255. */
static char *big_shared, *big_src, *big_dst;
static int big_shm, big_bcast, big_a2a; /* the protocol's shape, from its name (big_shape) */

static void big_shape(const char *proto)
{
    big_shm = strstr(proto, "-shm-") != NULL;
    big_bcast = strstr(proto, "bcast") != NULL;
    big_a2a = strstr(proto, "alltoall") != NULL;
}

static size_t src_bytes(void)
{
    return big_a2a ? (size_t)n * bytes : bytes;
}

static void big_setup(int me)
{
    size_t sb = src_bytes();
    if (big_shm)
        big_src = big_shared + (size_t)me * sb;
    else if (!(big_src = malloc(sb))) {
        perror("malloc");
        _exit(1);
    }
    for (size_t j = 0; j < sb / bytes; j++)
        memset(big_src + j * bytes, (me * 31 + (int)j) & 255, bytes);
    if (!(big_dst = malloc((size_t)n * bytes))) {
        perror("malloc");
        _exit(1);
    }
    memset(big_dst, 0, (size_t)n * bytes);
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    S->pid[me] = getpid();
    S->src[me] = big_src;
}

/* copy len bytes at offset off of rank r's source into dst */
static void big_read(int r, size_t off, char *dst, size_t len)
{
    if (big_shm) {
        memcpy(dst, big_shared + (size_t)r * src_bytes() + off, len);
        return;
    }
    struct iovec l = {dst, len}, t = {S->src[r] + off, len};
    if (process_vm_readv(S->pid[r], &l, 1, &t, 1, 0) != (ssize_t)len) {
        perror("process_vm_readv");
        _exit(1);
    }
}

static void big_call(int me)
{
    if (big_bcast) {
        if (me != 0) big_read(0, 0, big_dst, bytes);
        return;
    }
    size_t at = big_a2a ? (size_t)me * bytes : 0; /* alltoall: block me of every source */
    for (int i = 0; i < n; i++) {
        int r = (me + i) % n;
        if (r == me)
            memcpy(big_dst + (size_t)r * bytes, big_src + at, bytes);
        else
            big_read(r, at, big_dst + (size_t)r * bytes, bytes);
    }
}

static void big_check(const char *proto, int me)
{
    for (int r = 0; r < (big_bcast ? 1 : n); r++) {
        if (big_bcast && me == 0) break;
        const unsigned char *b = (const unsigned char *)big_dst + (size_t)r * bytes;
        unsigned char want = (unsigned char)((r * 31 + (big_a2a ? me : 0)) & 255);
        if (b[0] != want || b[bytes - 1] != want) {
            fprintf(stderr, "shm-floor: %s rank %d: block %d holds %u, not %u\n", proto, me, r, b[0], want);
            _exit(1);
        }
    }
}

/* the barrier between calls (-B): the tree (one release line) or every
 * rank reading every rank's line (coll/shm's default barrier) */
static int between_allread;
static void between(int me, uint64_t bk)
{
    if (between_allread)
        allread_barrier(S->bar, me, bk);
    else
        tree_barrier(S->bar, S->barrel, me, bk);
}

static double run(const char *proto, int me)
{
    uint64_t k = 0, bk = 0;
    double t = 0, sink = 0;
    int warm = iters / 10;
    for (size_t i = 0; i < sizeof(in_buf) / sizeof(in_buf[0]); i++)
        in_buf[i] = (float)(i % 7 + 1);
    if (!strncmp(proto, "big-", 4)) {
        big_setup(me);
        between(me, ++bk); /* every rank's pid and address are in place */
    }
    for (int it = 0; it < iters + warm; it++) {
        if (it == warm) {
            between(me, ++bk);
            t = 0;
        }
        double t0 = now();
        k++;
        if (!strcmp(proto, "pingpong")) {
            if (me == 0) {
                atomic_store_explicit(&S->arrive[0].seq, k, memory_order_release);
                wait_ge(&S->arrive[1].seq, k);
            } else if (me == 1) {
                wait_ge(&S->arrive[0].seq, k);
                atomic_store_explicit(&S->arrive[1].seq, k, memory_order_release);
            }
        } else if (!strcmp(proto, "tree")) {
            tree_barrier(S->arrive, S->release, me, k);
        } else if (!strcmp(proto, "tree-down")) {
            proto_tree_down(me, k);
        } else if (!strcmp(proto, "allread")) {
            proto_allread(me, k);
        } else if (!strcmp(proto, "dissem")) {
            proto_dissem(me, k);
        } else if (!strncmp(proto, "ar-tree", 7)) {
            sink += ar_tree(me, k, me + 1.0);
        } else if (!strcmp(proto, "arb-allread") || !strcmp(proto, "arb-demote")) {
            arb_allread(me, k, proto[4] == 'd');
        } else if (!strcmp(proto, "arb-chunked")) {
            arb_chunked(me, k);
        } else if (!strcmp(proto, "arb-chunked-seen")) {
            arb_chunked_seen(me, k);
        } else if (!strcmp(proto, "arb-chunked-ll")) {
            arb_chunked_ll(me, k);
        } else if (!strncmp(proto, "arb-ll", 6)) {
            arb_ll(me, k, !strcmp(proto, "arb-ll-dir"), !strcmp(proto, "arb-ll-tail"));
        } else if (!strcmp(proto, "arb-tree")) {
            arb_tree(me, k);
        } else if (!strncmp(proto, "big-", 4)) {
            big_call(me);
        } else if (!strncmp(proto, "ar-allread", 10)) {
            sink += ar_allread(me, k, me + 1.0);
        }
        t += now() - t0;
        if (strstr(proto, "-osu") || !strncmp(proto, "arb-", 4) || !strncmp(proto, "big-", 4)) between(me, ++bk);
    }
    if (sink < 0) printf("%g\n", sink);
    if (!strncmp(proto, "big-", 4)) big_check(proto, me);
    if (!strncmp(proto, "arb-", 4))
        for (size_t i = 0; i < bytes / sizeof(float); i++)
            if (out_buf[i] != (float)n * in_buf[i]) {
                fprintf(stderr, "shm-floor: %s rank %d: element %zu is %g, not %g\n", proto, me, i, out_buf[i],
                        (float)n * in_buf[i]);
                _exit(1);
            }
    return t / iters;
}

int main(int argc, char **argv)
{
    int c;
    while ((c = getopt(argc, argv, "n:i:r:f:s:b:p:B:")) != -1) {
        switch (c) {
        case 'n': n = atoi(optarg); break;
        case 'i': iters = atoi(optarg); break;
        case 'r': radix = atoi(optarg); break;
        case 'f': first = atoi(optarg); break;
        case 's': step = atoi(optarg); break;
        case 'b': bytes = (size_t)atol(optarg); break;
        case 'p': hint = atoi(optarg); break;
        case 'B': between_allread = !strcmp(optarg, "allread"); break;
        default: fprintf(stderr, "usage: %s [-n ranks] [-i iters] [-r radix] [-f cpu] [-s step] [-b bytes] [-p hint] [-B tree|allread] PROTO...\n", argv[0]); return 2;
        }
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (first < 0 || step < 1 || first + (long)(n - 1) * step >= cpus) {
        /* spinning ranks that share a CPU measure the scheduler, not the protocol */
        fprintf(stderr, "shm-floor: ranks on CPUs %d..%ld (step %d), but only CPUs 0..%ld are online\n", first,
                first + (long)(n - 1) * step, step, cpus - 1);
        return 2;
    }
    int big = optind < argc && !strncmp(argv[optind], "big-", 4);
    if (n < 2 || n > MAXR || radix < 2 || bytes < 4 || bytes > (big ? (size_t)64 << 20 : 4096) || bytes % 4) {
        fprintf(stderr, "shm-floor: 2 <= n <= %d, radix >= 2, bytes a multiple of 4 in 4..4096 (big-*: to 64 MiB, "
                        "not mixed with the others)\n", MAXR);
        return 2;
    }
    for (int a = optind; a < argc; a++) {
        const char *proto = argv[a];
#if defined(__x86_64__)
        unsigned eax = 7, ebx, ecx = 0, edx;
        __asm__("cpuid" : "+a"(eax), "=b"(ebx), "+c"(ecx), "=d"(edx));
        if (!strcmp(proto, "arb-ll-dir") && !(ecx & (1u << 28))) {
            fprintf(stderr, "shm-floor: %s: this CPU has no MOVDIR64B\n", proto);
            continue;
        }
#else
        if (!strcmp(proto, "arb-ll-dir")) continue;
#endif
        double runs[3];
        for (int rep = 0; rep < 3; rep++) {
            S = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            if (S == MAP_FAILED) {
                perror("mmap");
                return 1;
            }
            memset(S, 0, sizeof(*S));
            big_shape(proto);
            if (!strncmp(proto, "big-shm-", 8)) {
                big_shared = mmap(NULL, (size_t)n * src_bytes(), PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
                if (big_shared == MAP_FAILED) {
                    perror("mmap");
                    return 1;
                }
            }
            for (int r = 0; r < n; r++) {
                if (fork() == 0) {
                    cpu_set_t set;
                    CPU_ZERO(&set);
                    CPU_SET(first + r * step, &set);
                    if (sched_setaffinity(0, sizeof(set), &set)) perror("sched_setaffinity");
                    S->result[r] = run(proto, r);
                    _exit(0);
                }
            }
            int bad = 0;
            for (int r = 0; r < n; r++) {
                int st;
                wait(&st);
                bad |= !WIFEXITED(st) || WEXITSTATUS(st);
            }
            if (bad) return 1;
            double sum = 0;
            int m = !strcmp(proto, "pingpong") ? 2 : n;
            for (int r = 0; r < m; r++)
                sum += S->result[r];
            runs[rep] = sum / m * 1e6;
            munmap(S, sizeof(shared_t));
            if (!strncmp(proto, "big-shm-", 8)) munmap(big_shared, (size_t)n * src_bytes());
        }
        /* median of 3 */
        double a0 = runs[0], a1 = runs[1], a2 = runs[2], med = a0;
        if ((a0 <= a1 && a1 <= a2) || (a2 <= a1 && a1 <= a0)) med = a1;
        else if ((a0 <= a2 && a2 <= a1) || (a1 <= a2 && a2 <= a0)) med = a2;
        printf("%-16s n %3d radix %2d b %4zu p %2d %8.3f us  (runs %.3f %.3f %.3f)\n", proto, n, radix, bytes, hint, med,
               runs[0], runs[1], runs[2]);
        fflush(stdout);
    }
    return 0;
}
