/* coll/shm's segment: creation without any collective, attach, the flag
 * waits, release, failures and the stale-segment sweep (segment.h has the
 * layout).
 *
 * Name: /weft-<job>-<host>-<context id>-<members hash>-<tag>, where the
 * tag is a keyed hash (weft_prf64) of the context id and the members
 * under the communicator's nonce, a secret its members agreed on at its
 * creation (src/comm.c): every member computes the name, nobody outside
 * the job can, and a name seen in /dev/shm tells nothing about another.
 * Communicator rank 0 creates it (O_CREAT | O_EXCL, mode exactly 0600),
 * sizes it and marks it ready; the others open it when it appears and
 * refuse it unless this user owns it with mode 0600 (anything else is
 * another user's, who could read and write the members' data), and every
 * rank counts itself in the header. The last to attach unlinks the name,
 * so from then on the memory lives exactly as long as some rank maps it: a
 * killed job leaves nothing. A job killed before every rank attached
 * leaves the name; the header records the creator's pid and host, and the
 * next weft_init on the host removes segments whose creator is gone.
 *
 * Failures end every member's wait at once, not at its deadline: a name
 * taken by someone else fails the creator (O_EXCL) and the others (owner
 * and mode); a creator that cannot create, size or map it (a full
 * /dev/shm, one out of inodes) removes the name and sends every member a
 * notice (a control message, so it needs no file: create_failed), which
 * a member waiting for the segment finds (wait_notice); a collective
 * that fails on one rank (a mismatch, a timeout,
 * a cancel) breaks the communicator's shared-memory sequence there, and it
 * records that in the header (`poison`), where the schedule's watch of
 * every other member's later collective finds it. */
#include "coll/shm/segment.h"

#include "op.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC  UINT64_C(0x77656674736d3031) /* "weftsm01" */
#define SHM_HEADER ((size_t)4096)

/* The creator's mode. */
#define SHM_MODE 0600
/* The tag (control class, rank 0 to each member) of the creator's notice
 * that the segment could not be set up; the communicator's context keeps
 * it apart from other communicators' (src/comm.c's warm-up uses tags
 * below 16). */
#define SHM_NOTICE_TAG 0x5348

typedef struct shm_header {
    _Atomic uint64_t ready; /* SHM_MAGIC once the creator filled the header */
    /* 1 + the first collective number every member fails at once (a
     * member's collective failed: from the next on, none can complete);
     * 0: none. Written once, by the first member to fail (poison_rank: 1 +
     * its rank, claimed first), with its status. */
    _Atomic uint64_t poison;
    _Atomic uint32_t poison_rank;
    int32_t poison_rc;
    int64_t creator_pid;
    uint64_t host_id;
    uint64_t len;
    uint32_t nranks;
    _Atomic uint32_t attached;
    uint32_t radix;       /* the creator's WEFT_SHM_RADIX: every member uses it, so all agree on the tree */
    uint64_t chunk_min;   /* the creator's WEFT_SHM_CHUNK_MIN, likewise */
    uint64_t flat_max;    /* the creator's WEFT_SHM_FLAT_MAX, likewise */
    uint32_t flat_pieces; /* the creator's WEFT_SHM_FLAT_PIECES, likewise */
    /* members asleep on their bells (weft_shm_ring), in a line of its own:
     * every flag's raiser reads it */
    _Alignas(64) _Atomic uint32_t sleepers;
} shm_header_t;
_Static_assert(sizeof(shm_header_t) <= SHM_HEADER, "the header fits its page");

static size_t segment_len(int n)
{
    return SHM_HEADER + (size_t)n * sizeof(weft_shm_ctrl_t) +
           (size_t)n * WEFT_SHM_NBUF * (WEFT_SHM_SLOT_STRIDE + WEFT_SHM_LL_SPAN);
}

static uint64_t members_hash(weft_comm_t comm)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (int r = 0; r < comm->size; r++) {
        h ^= (uint32_t)weft_comm_world_rank_of(comm, r);
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* The communicator's state, created (not attached) on first use; NULL on
 * several nodes, one rank, out of memory or after a failed creation. */
static weft_shm_t *comm_shm(weft_comm_t comm)
{
    weft_shm_t *sh = weft_coll_state(comm, WEFT_COLL_COMP_SHM);
    if (WEFT_LIKELY(sh)) return sh;
    if (comm->size < 2 || weft_comm_spans_nodes(comm)) return NULL;
    if (!(sh = calloc(1, sizeof(*sh)))) return NULL;
    if (!(sh->seen_done = calloc((size_t)comm->size, sizeof(uint64_t)))) {
        free(sh);
        return NULL;
    }
    sh->n = comm->size;
    sh->me = comm->rank;
    sh->comm = comm;
    sh->len = segment_len(comm->size);
    uint64_t members = members_hash(comm);
    snprintf(sh->name, sizeof(sh->name), "/weft-%016llx-%016llx-%x-%08x-%016llx", (unsigned long long)weft_g.job_id,
             (unsigned long long)weft_topo_host_id(), (unsigned)comm->context_id, (unsigned)(members >> 32),
             (unsigned long long)weft_prf64(weft_comm_nonce(comm), comm->context_id, members));
    if (weft_coll_state_set(comm, WEFT_COLL_COMP_SHM, sh)) {
        free(sh->seen_done);
        free(sh);
        return NULL;
    }
    return sh;
}

weft_shm_t *weft_shm_get(weft_comm_t comm, size_t bytes)
{
    weft_shm_t *sh = bytes > WEFT_SHM_SLOT ? NULL : comm_shm(comm);
    return sh && WEFT_UNLIKELY(sh->unusable) ? NULL : sh;
}

weft_shm_t *weft_shm_get_cma(weft_comm_t comm)
{
    weft_shm_t *sh = weft_shm_cma_usable() ? comm_shm(comm) : NULL;
    return sh && WEFT_UNLIKELY(sh->unusable) ? NULL : sh;
}

int weft_shm_unsettled(weft_comm_t comm)
{
    const weft_shm_t *sh = weft_coll_state(comm, WEFT_COLL_COMP_SHM);
    return sh && !sh->mapped && !sh->unusable && !sh->broken;
}

int weft_shm_cma_usable(void)
{
    static int works = -1; /* probed once per process */
    if (WEFT_UNLIKELY(works < 0)) {
        int ok = 1;
        FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
        if (f) { /* 1: only descendants may attach (our peers are siblings); 2, 3: admin only / never */
            int scope = 0;
            if (fscanf(f, "%d", &scope) == 1 && scope != 0) ok = 0;
            fclose(f);
        }
        if (ok) { /* ENOSYS (no CONFIG_CROSS_MEMORY_ATTACH), EPERM (seccomp) */
            volatile uint64_t src = UINT64_C(0x636d6170726f6265), dst = 0;
            struct iovec l = {(void *)&dst, sizeof(dst)}, r = {(void *)&src, sizeof(src)};
            ok = process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)sizeof(dst) && dst == src;
        }
        if (!ok) weft_debug("coll/shm: cross-memory attach unavailable: the shm_cma algorithms decline");
        works = ok;
    }
    return works && weft_shm_vars.cma;
}

int weft_shm_cma_read(void *dst, int64_t pid, uint64_t raddr, size_t len, const char *alg)
{
    size_t got = 0;
    while (got < len) {
        struct iovec l = {(char *)dst + got, len - got}, r = {(void *)(uintptr_t)(raddr + got), len - got};
        ssize_t n = process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return weft_error(WEFT_ERR_INTERNAL, "%s: process_vm_readv from pid %lld failed after %zu of %zu bytes: %s",
                              alg, (long long)pid, got, len, n < 0 ? strerror(errno) : "no progress");
        got += (size_t)n;
    }
    return 0;
}

int weft_shm_cma_read_lent(const weft_shm_t *sh, int r, uint64_t sig, size_t at, void *dst, size_t len, const char *alg)
{
    const weft_shm_ctrl_t *c = &sh->ctrl[r];
    if (c->cma_sig != sig) return weft_shm_sig_differs(r, -1, c->cma_sig, sig, alg);
    return weft_shm_cma_read(dst, c->cma_pid, c->cma_addr + at, len, alg);
}

int weft_shm_cma_run(weft_sched_t *s, weft_shm_op_t *op, const void *buf, uint64_t sig, int *rc,
                     weft_shm_cma_work_fn work, void *arg)
{
    int r;
    switch (op->phase) {
    case 0:
        if ((r = weft_shm_op_begin(s, op)) <= 0) return r;
        if (!weft_shm_cma_lend(s, op, buf, sig)) return 0;
        op->phase = 1;
        /* fall through */
    case 1:
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, arrived), op->k + 1, -1, "arrival flag")) return 0;
        *rc = work(op, arg);
        weft_shm_publish(op, offsetof(weft_shm_ctrl_t, done)); /* even after a failed read */
        op->phase = 2;
        /* fall through */
    case 2:
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, done), op->k + 1, -1, "done flag")) return 0;
        op->sh->completed = op->k + 1;
        return *rc ? *rc : 1;
    }
    return WEFT_ERR_INTERNAL;
}

int weft_shm_cma_reduce(const weft_shm_op_t *op, const char *mine, uint64_t sig, size_t off, size_t len, size_t esize,
                        int dtype, int rop, char *tmp, char *dst, const char *alg)
{
    const weft_shm_t *sh = op->sh;
    size_t per = WEFT_SHM_CMA_PIECE / esize;
    for (size_t p = 0; p < len; p += per) {
        size_t cnt = len - p < per ? len - p : per, at = (off + p) * esize, bytes = cnt * esize;
        char *acc = dst + p * esize; /* the piece's result, reduced where it goes */
        if (acc != mine + at) memcpy(acc, mine + at, bytes);
        for (int i = 1; i < sh->n; i++) {
            int rc = weft_shm_cma_read_lent(sh, (sh->me + i) % sh->n, sig, at, tmp, bytes, alg);
            if (rc) return rc;
            weft_op_reduce((weft_op_t)rop, (weft_dtype_t)dtype, acc, tmp, cnt);
        }
        weft_op_finalize((weft_op_t)rop, (weft_dtype_t)dtype, acc, cnt, sh->n);
    }
    return 0;
}

static void set_pointers(weft_shm_t *sh)
{
    sh->ctrl = (weft_shm_ctrl_t *)(sh->base + SHM_HEADER);
    sh->bell.bell = &sh->ctrl[sh->me].bell;
    sh->bell.sleepers = &((shm_header_t *)sh->base)->sleepers;
    sh->data = sh->base + SHM_HEADER + (size_t)sh->n * sizeof(weft_shm_ctrl_t);
    sh->ll = sh->data + (size_t)sh->n * WEFT_SHM_NBUF * WEFT_SHM_SLOT_STRIDE;
}

/* The segment failed here (status rc, its message already set): later
 * ops fail at once with it (weft_shm_op_begin). Returns rc. */
static int set_broken(weft_shm_t *sh, uint64_t k, int rc)
{
    if (!sh->broken) {
        sh->broken = rc;
        sh->broken_k = k;
        snprintf(sh->why, sizeof(sh->why), "%s", weft_last_error());
    }
    sh->ready = 0; /* later ops take weft_shm_op_begin's slow way, which fails them */
    return rc;
}

static int broken_error(const weft_shm_t *sh)
{
    return weft_error(sh->broken,
                      "coll/shm: comm %s: an earlier shared-memory collective failed on this rank (%s), so every "
                      "later shared-memory collective on this communicator fails at once (free it; WEFT_COLL_TUNE "
                      "can keep its calls off coll/shm)",
                      sh->comm->name, sh->why);
}

/* Records in the header that the other members' collectives from number
 * `from` on fail at once (their watch), because this rank's failed with
 * rc. The first member to fail keeps the record. */
static void poison(weft_shm_t *sh, uint64_t from, int rc)
{
    shm_header_t *h = (shm_header_t *)sh->base;
    uint32_t none = 0;
    if (!atomic_compare_exchange_strong_explicit(&h->poison_rank, &none, (uint32_t)sh->me + 1, memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    h->poison_rc = rc;
    atomic_store_explicit(&h->poison, from + 1, memory_order_release);
    if (sh->bell.sleepers) weft_shm_ring(sh); /* the members asleep find it (once attached: set_pointers) */
}

/* The schedule's watch (weft_sched_watch) of every op: while it waits, a
 * failure recorded here or by another member in the header fails it at
 * once, when it is a later collective than the failed one, or the failed
 * one itself where the failing rank had not begun it (in a collective it
 * took part in, the others may still get what they wait for: they go on,
 * and time out as before where they do not). */
static int watch_check(void *arg)
{
    weft_shm_op_t *op = arg;
    weft_shm_t *sh = op->sh;
    if (op->k == UINT64_MAX) return 0;
    if (sh->broken && op->k0 > sh->broken_k) return broken_error(sh);
    if (!sh->base) return 0;
    shm_header_t *h = (shm_header_t *)sh->base;
    uint64_t from = atomic_load_explicit(&h->poison, memory_order_acquire);
    if (!from || op->k0 + 1 < from) return 0;
    int r = (int)atomic_load_explicit(&h->poison_rank, memory_order_relaxed) - 1;
    weft_error(WEFT_ERR_COMM,
               "coll/shm: comm %s: rank %d's shared-memory collective failed (%s), so this one (number %llu) cannot "
               "complete; every later shared-memory collective on this communicator fails at once (free it)",
               sh->comm->name, r, weft_strerror(h->poison_rc), (unsigned long long)op->k0);
    return set_broken(sh, op->k0, WEFT_ERR_COMM);
}

/* The op's schedule failed (or was canceled, or timed out) after the op
 * took its numbers: the communicator's shared-memory sequence is out of
 * step here. */
static void watch_failed(void *arg, int rc)
{
    weft_shm_op_t *op = arg;
    weft_shm_t *sh = op->sh;
    if (op->k == UINT64_MAX) return; /* it never started: nothing is out of step */
    if (!sh->broken) {
        sh->broken = WEFT_ERR_COMM;
        sh->broken_k = op->k0;
        snprintf(sh->why, sizeof(sh->why), "collective number %llu failed here (%s)", (unsigned long long)op->k0,
                 weft_strerror(rc));
    }
    sh->ready = 0;
    /* phase 0: it published nothing of its collective (its first steps
     * never ran, as when WEFT_COLL_CHECK failed the call), so no member can
     * complete that one either */
    if (sh->base) poison(sh, op->phase == 0 ? op->k0 : op->k0 + 1, rc);
    /* A rank that found the members' calls differ (a signature: coll/shm's
     * only WEFT_ERR_ARG once begun) reads no more of them: it is done with
     * every piece the others' ops may have (a root's bcast of more pieces
     * than this rank's waited for its done flag of a piece it never had). */
    if (sh->base && rc == WEFT_ERR_ARG && op->phase != 0) {
        atomic_store_explicit(&sh->ctrl[sh->me].done, UINT64_MAX / 2, memory_order_release);
        weft_shm_ring(sh);
    }
}

/* The op takes its sequence numbers when its schedule starts: in the
 * user's call order on every rank, also when the op's first poll comes
 * later (after rounds of messages before it: WEFT_COLL_CHECK). */
static void watch_start(void *arg)
{
    weft_shm_op_t *op = arg;
    if (op->k != UINT64_MAX) return;
    op->k = op->k0 = op->sh->ops;
    op->sh->ops += op->nk;
}

static const weft_sched_watch_t shm_watch = {.start = watch_start, .check = watch_check, .failed = watch_failed};

/* The notice's payload (never read: its arrival is the message). */
static const uint64_t notice_out = SHM_MAGIC;

/* Creator: the segment cannot be had (rc, its message set): the name is
 * removed, and every member is told through a control message instead of
 * a file (on a /dev/shm out of inodes no file can be made) so it runs its
 * calls without shared memory too instead of waiting for the segment. The
 * sends finish in the background. Returns rc. */
static int create_failed(weft_shm_t *sh, int rc)
{
    char saved[1024];
    snprintf(saved, sizeof(saved), "%s", weft_last_error());
    sh->unusable = 1;
    for (int r = 1; r < sh->n; r++) {
        weft_request_t req;
        if (weft_xport->isend(&notice_out, sizeof(notice_out), r, WEFT_TAG_CLASS_CTRL, SHM_NOTICE_TAG, sh->comm,
                              &req) == WEFT_SUCCESS)
            weft_request_free(&req);
        else
            weft_warn("coll/shm: comm %s: cannot tell rank %d that segment %s could not be set up (%s): it waits for "
                      "the segment until its call's deadline",
                      sh->comm->name, r, sh->name, weft_last_error());
    }
    return weft_error(rc, "%s", saved);
}

/* Creator: 1 done, < 0 error. */
static int create(weft_shm_t *sh)
{
    int fd = shm_open(sh->name, O_RDWR | O_CREAT | O_EXCL, SHM_MODE);
    if (fd < 0) {
        int err = errno;
        if (err == EEXIST)
            return weft_error(WEFT_ERR_INTERNAL,
                              "coll/shm: shared-memory segment %s already exists: something outside this job took "
                              "the communicator's segment name before its creator; refusing it (so do the other "
                              "members)",
                              sh->name);
        struct statvfs v;
        if (err == ENOSPC && !statvfs("/dev/shm", &v) && v.f_favail == 0)
            return create_failed(sh, weft_error(WEFT_ERR_NO_MEMORY,
                                                "coll/shm: /dev/shm has no free inodes: cannot create segment %s "
                                                "(another user may have filled it with files)",
                                                sh->name));
        return create_failed(sh, weft_error(WEFT_ERR_NO_MEMORY, "coll/shm: cannot create shared-memory segment %s: %s",
                                            sh->name, strerror(err)));
    }
    int err = 0;
    /* exactly 0600 whatever the umask: the other members check it. The
     * pages are allocated now, and the size set by the same call (tmpfs
     * sets it only once every page is there): a sparse segment on a full
     * /dev/shm (any user can fill it) would raise SIGBUS at the first
     * touch of a page with no space behind it, in any member that mapped
     * it at its full size; a full one fails here. */
    if (fchmod(fd, SHM_MODE))
        err = errno;
    else
        err = posix_fallocate(fd, 0, (off_t)sh->len);
    void *p = err ? MAP_FAILED : mmap(NULL, sh->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!err && p == MAP_FAILED) err = errno;
    if (err) {
        /* (a member that opened it meanwhile found it short of its size, or not ready: it waits, and gets the notice) */
        shm_unlink(sh->name);
        close(fd);
        if (err == ENOSPC)
            return create_failed(sh, weft_error(WEFT_ERR_NO_MEMORY,
                                                "coll/shm: /dev/shm is full: no room for segment %s (%zu bytes; a "
                                                "container's /dev/shm is enlarged by docker run --shm-size or, on "
                                                "Kubernetes, an emptyDir of medium Memory at /dev/shm)",
                                                sh->name, sh->len));
        return create_failed(sh, weft_error(WEFT_ERR_NO_MEMORY, "coll/shm: cannot size or map segment %s (%zu bytes): %s",
                                            sh->name, sh->len, strerror(err)));
    }
    close(fd);
    sh->base = p;
    shm_header_t *h = p;
    h->creator_pid = getpid();
    h->host_id = weft_topo_host_id();
    h->len = sh->len;
    h->nranks = (uint32_t)sh->n;
    if (weft_shm_vars.radix < 2) weft_warn("WEFT_SHM_RADIX=%d is below 2: coll/shm uses 2", weft_shm_vars.radix);
    h->radix = (uint32_t)(weft_shm_vars.radix < 2 ? 2 : weft_shm_vars.radix);
    h->chunk_min = weft_shm_vars.chunk_min < 0 ? 0 : (uint64_t)weft_shm_vars.chunk_min;
    h->flat_max = weft_shm_vars.flat_max < 0 ? 0 : (uint64_t)weft_shm_vars.flat_max;
    h->flat_pieces = weft_shm_vars.flat_pieces < 0 ? 0 : (uint32_t)weft_shm_vars.flat_pieces;
    atomic_store_explicit(&h->attached, 0, memory_order_relaxed);
    atomic_store_explicit(&h->ready, SHM_MAGIC, memory_order_release);
    return 1;
}

/* A member whose segment is not there yet: has the creator's notice
 * come? It is looked for, not received (nothing is posted that a
 * communicator's free would find pending; a freed communicator's messages
 * are discarded). 0: not (yet); < 0 with sh->unusable set: it came. */
static int wait_notice(weft_shm_t *sh)
{
    if (!weft_xport->arrived(0, WEFT_TAG_CLASS_CTRL, SHM_NOTICE_TAG, sh->comm)) return 0;
    sh->unusable = 1;
    return weft_error(WEFT_ERR_INTERNAL,
                      "coll/shm: shared-memory segment %s: its creator (rank 0) could not set it up (rank 0's log "
                      "says why; often a full /dev/shm)",
                      sh->name);
}

/* The others: 1 mapped, 0 not there (or not ready) yet, < 0 error. What
 * is under the name is refused unless this user owns it with mode 0600:
 * anything else was made by someone who could read or write it. */
static int open_existing(weft_shm_t *sh)
{
    /* O_NONBLOCK: a FIFO under the name must not stop this rank (shm_open adds O_NOFOLLOW) */
    int fd = shm_open(sh->name, O_RDWR | O_NONBLOCK, 0);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT) return 0;
        return weft_error(WEFT_ERR_INTERNAL, "coll/shm: cannot open shared-memory segment %s: %s%s", sh->name,
                          strerror(err), err == EACCES ? " (another user's)" : "");
    }
    struct stat st;
    int rc = 0;
    unsigned mode = 0;
    if (fstat(fd, &st)) {
        rc = weft_error(WEFT_ERR_INTERNAL, "coll/shm: cannot stat shared-memory segment %s: %s", sh->name,
                        strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = weft_error(WEFT_ERR_INTERNAL,
                        "coll/shm: shared-memory segment %s is not a regular file (mode %06o): something outside "
                        "this job took the communicator's segment name; refusing it",
                        sh->name, (unsigned)st.st_mode);
    } else if (st.st_uid != geteuid()) {
        rc = weft_error(WEFT_ERR_INTERNAL,
                        "coll/shm: shared-memory segment %s belongs to uid %u, not to this job's user (uid %u): "
                        "refusing it (its owner could read and write the members' data)",
                        sh->name, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if ((mode = (unsigned)st.st_mode & 07777) != SHM_MODE &&
               !((mode & ~(unsigned)SHM_MODE) == 0 && st.st_size == 0)) {
        /* (a smaller mode on an empty file: the creator's umask, before its fchmod) */
        rc = weft_error(WEFT_ERR_INTERNAL,
                        "coll/shm: shared-memory segment %s has mode %04o, not %04o: refusing it (its creator, if "
                        "not rank 0, could let others read or write the members' data)",
                        sh->name, mode, (unsigned)SHM_MODE);
    }
    if (rc || mode != SHM_MODE || (size_t)st.st_size < sh->len) { /* an error, or the creator has not sized it yet */
        close(fd);
        return rc;
    }
    /* Mapped only once the creator marked it ready (read, not mapped: a
     * creator that fails after sizing it removes it, and a mapping's
     * touch past the end would raise SIGBUS); after that it never shrinks. */
    uint64_t ready = 0;
    if (pread(fd, &ready, sizeof(ready), offsetof(shm_header_t, ready)) != (ssize_t)sizeof(ready) ||
        ready != SHM_MAGIC) {
        close(fd);
        return 0;
    }
    void *p = mmap(NULL, sh->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED)
        return weft_error(WEFT_ERR_NO_MEMORY, "coll/shm: cannot map segment %s: %s", sh->name, strerror(err));
    shm_header_t *h = p;
    if (atomic_load_explicit(&h->ready, memory_order_acquire) != SHM_MAGIC) {
        munmap(p, sh->len);
        return 0;
    }
    if (h->nranks != (uint32_t)sh->n || h->len != sh->len) {
        munmap(p, sh->len);
        return weft_error(WEFT_ERR_INTERNAL, "coll/shm: segment %s is for %u ranks, this communicator has %d", sh->name,
                          h->nranks, sh->n);
    }
    sh->base = p;
    return 1;
}

/* The segment could not be set up (every member learns it alike): a
 * call with a fallback runs that (WEFT_SCHED_FALLBACK), others fail. */
static int unusable(weft_sched_t *s, weft_shm_t *sh)
{
    if (!weft_sched_has_fallback(s)) return broken_error(sh);
    weft_debug("coll/shm: comm %s: the call runs without shared memory (%s)", sh->comm->name, sh->why);
    return WEFT_SCHED_FALLBACK;
}

static int attach(weft_sched_t *s, weft_shm_op_t *op)
{
    weft_shm_t *sh = op->sh;
    shm_header_t *h;
    if (sh->unusable) return unusable(s, sh);
    if (sh->broken) return broken_error(sh);
    if (!sh->mapped) {
        int rc = sh->me == 0 ? create(sh) : open_existing(sh);
        if (rc == 0) rc = wait_notice(sh); /* not there yet: or will it never be? */
        if (rc < 0 && sh->unusable) {
            set_broken(sh, op->k0, rc);
            static int warned;            /* once a process: every new communicator's segment fails alike */
            if (sh->me == 0 && !warned++) /* (the others learn it from the notice, not why) */
                weft_warn("coll/shm: comm %s: its shared-memory segment could not be set up (%s): its collectives "
                          "run without shared memory from now on (slower)",
                          sh->comm->name, sh->why);
            return unusable(s, sh);
        }
        if (rc < 0) return set_broken(sh, op->k0, rc);
        if (rc == 0) {
            weft_sched_waiting(s, 0, "rank 0's shared-memory segment (not created yet)");
            return 0;
        }
        set_pointers(sh);
        sh->mapped = 1;
        h = (shm_header_t *)sh->base;
        sh->radix = h->radix >= 2 ? (int)h->radix : 2;
        sh->chunk_min = (size_t)h->chunk_min;
        sh->flat_max = (size_t)h->flat_max;
        sh->flat_pieces = (int)h->flat_pieces;
        atomic_store_explicit(&sh->ctrl[sh->me].mapped, 1, memory_order_release);
        weft_shm_ring(sh);
        if (atomic_fetch_add_explicit(&h->attached, 1, memory_order_acq_rel) + 1 == (uint32_t)sh->n)
            shm_unlink(sh->name); /* the last to attach: from now on only the mappings keep it */
    }
    /* Every member mapped it (the name is gone): a rank that never comes
     * is named in the timeout. */
    if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, mapped), 1, -1, "attach flag (has it mapped the segment?)"))
        return 0;
    sh->ready = 1;
    return 1;
}

void weft_shm_ring_all(const weft_shm_t *sh)
{
    for (int r = 0; r < sh->n; r++)
        if (r != sh->me && atomic_load_explicit(&sh->ctrl[r].bell.asleep, memory_order_relaxed))
            weft_bell_ring(&sh->ctrl[r].bell);
}

int weft_shm_op_begin(weft_sched_t *s, weft_shm_op_t *op)
{
    weft_shm_t *sh = op->sh;
    if (WEFT_UNLIKELY(op->k == UINT64_MAX)) watch_start(op); /* (the schedule's start took them) */
    if (WEFT_UNLIKELY(!sh->ready)) {
        int rc = attach(s, op);
        if (rc <= 0) return rc;
    }
    if (WEFT_UNLIKELY(sh->completed != op->k)) {
        weft_sched_waiting(s, -1, "this rank's previous shared-memory collective on the communicator");
        return 0;
    }
    /* No lend of an earlier collective stays up (every reader of it is
     * done): a single-copy rank whose peer runs another algorithm for this
     * call (their counts fall under different rules) then finds no
     * signature (0: no message has length 0) and fails, instead of reading
     * the stale buffer. Written only when set: the line others poll is not
     * touched by every small collective. */
    weft_shm_ctrl_t *c = &sh->ctrl[sh->me];
    if (WEFT_UNLIKELY(c->cma_sig)) c->cma_sig = 0;
    return 1;
}

int weft_shm_wait(weft_sched_t *s, weft_shm_op_t *op, size_t field, uint64_t target, int only, const char *flag)
{
    weft_shm_t *sh = op->sh;
    int lo = only >= 0 ? only : 0, hi = only >= 0 ? only + 1 : sh->n, late = -1;
    /* A nonblocking post leaves what comes after the flags (the copies and
     * reductions) to the progress thread; its own flags are published. */
    if (WEFT_UNLIKELY(weft_sched_posting(s))) {
        weft_shm_waiting(s, sh, lo, flag);
        return 0;
    }
    /* Every flag is loaded before any is judged, so the cache misses of
     * lines other cores just wrote overlap instead of queueing one after
     * another (the ones seen before are cache hits). */
    for (int r = lo; r < hi; r++) {
        _Atomic uint64_t *f = (_Atomic uint64_t *)((char *)&sh->ctrl[r] + field);
        if (atomic_load_explicit(f, memory_order_acquire) < target && late < 0) late = r;
    }
    if (late < 0) {
        if (only < 0) weft_shm_all_started(sh, target - 1); /* counters are k + 1: all are in k = target - 1 */
        return 1;
    }
    weft_shm_waiting(s, sh, late, flag);
    return 0;
}

/* 1 when member r finished collective need - 1 (from the cache, or
 * reloading its counter); 0 after naming it as the one waited on. */
static int done_by(weft_sched_t *s, weft_shm_t *sh, int r, uint64_t need)
{
    if (sh->seen_done[r] >= need || sh->all_done >= need) return 1;
    sh->seen_done[r] = atomic_load_explicit(&sh->ctrl[r].done, memory_order_acquire);
    if (sh->seen_done[r] >= need) return 1;
    weft_shm_waiting(s, sh, r, "done flag (it still reads a slot this rank reuses)");
    return 0;
}

void weft_shm_record(weft_shm_op_t *op, int readers, int root)
{
    weft_shm_t *sh = op->sh;
    int b = (int)(op->k % WEFT_SHM_NBUF);
    if (sh->use[b].k == op->k + 1) { /* claimed before in this collective: one more kind of reader */
        sh->use[b].readers |= readers;
        return;
    }
    sh->use[b].k = op->k + 1;
    sh->use[b].readers = readers;
    sh->use[b].root = root;
}

/* 1 when every child of v (tree of `root`, radix `radix`) finished
 * collective need - 1 (done_by). */
static int children_done(weft_sched_t *s, weft_shm_t *sh, int v, int root, int radix, uint64_t need)
{
    int ok = 1;
    WEFT_SHM_FOR_CHILDREN_R(sh, radix, v, root, c, {
        if (ok && !done_by(s, sh, c, need)) ok = 0;
    });
    return ok;
}

int weft_shm_claim(weft_sched_t *s, weft_shm_op_t *op, int readers, int root)
{
    weft_shm_t *sh = op->sh;
    int b = (int)(op->k % WEFT_SHM_NBUF);
    /* A nonblocking post writes no piece: the thread writes them all (a
     * copy inside the post is time the caller cannot compute in). */
    if (WEFT_UNLIKELY(weft_sched_posting(s))) {
        weft_sched_waiting(s, -1, "this rank's turn to write its next piece");
        return 0;
    }
    uint64_t need = sh->use[b].k;
    if (need && need != op->k + 1) { /* the previous use's readers */
        int prev = sh->use[b].readers, proot = sh->use[b].root;
        if (prev & WEFT_SHM_READ_ALL) {
            /* all_done, the usual case, answers for every member at once */
            for (int r = 0; r < sh->n && sh->all_done < need; r++)
                if (r != sh->me && !done_by(s, sh, r, need)) return 0;
        } else {
            int v = weft_shm_vrank(sh, proot);
            if ((prev & WEFT_SHM_READ_PARENT) && v != 0 &&
                !done_by(s, sh, weft_shm_rank_of(sh, weft_shm_parent(v, sh->radix), proot), need))
                return 0;
            if ((prev & WEFT_SHM_READ_CHILDREN) && !children_done(s, sh, v, proot, sh->radix, need)) return 0;
        }
    }
    weft_shm_record(op, readers, root);
    return 1;
}

int weft_shm_sig_mismatch(weft_shm_op_t *op, int r, int root, uint64_t sig, const char *alg)
{
    return weft_shm_sig_differs(r, root, weft_shm_head(op, r)->sig, sig, alg);
}

int weft_shm_sig_differs(int r, int root, uint64_t theirs, uint64_t sig, const char *alg)
{
    char who[96];
    if (theirs == sig) return 0;
    if (root < 0) /* no tree: every rank reads every member */
        snprintf(who, sizeof(who), "rank %d", r);
    else
        snprintf(who, sizeof(who), "rank %d (%s, root %d)", r,
                 r == root ? "the root" : "this rank's neighbour in the tree", root);
    return weft_shm_sig_differs_who(who, theirs, sig, alg);
}

int weft_shm_sig_differs_who(const char *who, uint64_t theirs, uint64_t sig, const char *alg)
{
    if (theirs == sig) return 0;
    if (theirs == 0) /* no lend (a slot algorithm ran there), or no contribution in the slot (a lend) */
        return weft_error(WEFT_ERR_ARG,
                          "%s: %s ran another shared-memory algorithm for this call (single copy against the slots; "
                          "their calls fall under different selection rules: the ranks passed different counts or "
                          "datatypes)",
                          alg, who);
    if (theirs == WEFT_SHM_SIG_BAD)
        return weft_error(WEFT_ERR_ARG,
                          "%s: %s found that the members' calls differ (the ranks passed different counts, "
                          "datatypes, ops or roots)",
                          alg, who);
    if ((theirs ^ sig) & WEFT_SHM_SIG_MARKS)
        return weft_error(WEFT_ERR_ARG,
                          "%s: %s ran another shared-memory algorithm for this call (%s; their calls fall under "
                          "different selection rules: the ranks passed different counts or datatypes)",
                          alg, who,
                          theirs & WEFT_SHM_SIG_ALLREAD   ? "shm_allread"
                          : theirs & WEFT_SHM_SIG_CHUNKED ? "the chunked allreduce"
                          : theirs & WEFT_SHM_SIG_LL      ? "shm_ll"
                                                          : "a tree");
    int td = (int)(theirs >> 56 & 0xf), md = (int)(sig >> 56 & 0xf), to = (int)(theirs >> 52 & 0xf),
        mo = (int)(sig >> 52 & 0xf), tr = (int)(theirs >> 40 & 0xfff), mr = (int)(sig >> 40 & 0xfff);
    if (td != md)
        return weft_error(WEFT_ERR_ARG,
                          "%s: %s passed datatype %s, this rank %s (the ranks passed different datatypes)", alg, who,
                          weft_dtype_name((weft_dtype_t)td), weft_dtype_name((weft_dtype_t)md));
    if (to != mo)
        return weft_error(WEFT_ERR_ARG, "%s: %s passed op %s, this rank %s (the ranks passed different ops)", alg, who,
                          weft_op_name((weft_op_t)to), weft_op_name((weft_op_t)mo));
    if (tr != mr && !strncmp(alg, "reduce_scatter", 14)) /* the root's bits hash the receive counts */
        return weft_error(WEFT_ERR_ARG,
                          "%s: %s passed other receive counts (hashes %03x, this rank %03x: the ranks passed "
                          "different counts)",
                          alg, who, (unsigned)tr, (unsigned)mr);
    if (tr != mr)
        return weft_error(WEFT_ERR_ARG, "%s: %s passed root %d, this rank %d (the ranks passed different roots)", alg,
                          who, tr, mr);
    return weft_error(
        WEFT_ERR_ARG, "%s: %s has a %llu-byte message, this rank's is %llu bytes (the ranks passed different counts)",
        alg, who, (unsigned long long)(theirs & WEFT_SHM_SIG_LEN), (unsigned long long)(sig & WEFT_SHM_SIG_LEN));
}

int weft_shm_check_sigs(weft_shm_op_t *op, uint64_t sig, const char *alg)
{
    int b = (int)(op->k % WEFT_SHM_NBUF);
    uint32_t mine = weft_shm_sig32(sig);
    for (int r = 0; r < op->sh->n; r++) {
        uint32_t theirs = op->sh->ctrl[r].slot_sig[b];
        if (theirs != mine)
            return weft_shm_sig_differs(r, -1, weft_shm_sig_from32(theirs), weft_shm_sig_from32(mine), alg);
    }
    return 0;
}

int weft_shm_tree_down(weft_sched_t *s, weft_shm_op_t *op, int root, void *dst, size_t bytes, int flat, uint64_t sig,
                       const char *alg, const char *flag)
{
    weft_shm_t *sh = op->sh;
    int v = weft_shm_vrank(sh, root);
    int from = flat ? root : weft_shm_rank_of(sh, weft_shm_parent(v, sh->radix), root);
    if (!weft_shm_head_wait(s, op, from, WEFT_SHM_RESULT, flag)) return 0;
    int bad = sig ? weft_shm_sig_mismatch(op, from, root, sig, alg) : 0;
    const char *src = weft_shm_buf(op, from, bytes);
    /* A mismatch read flat may be a tree for the others (a piece's form
     * follows its length, which differs): the children get the bad mark. */
    if ((!flat || bad) && weft_shm_has_children(v, sh->radix, sh->n)) {
        if (!weft_shm_claim(s, op, WEFT_SHM_READ_CHILDREN, root)) return 0;
        /* after a mismatch no data, and a bad mark: its children fail too */
        if (!bad) memcpy(weft_shm_buf(op, sh->me, bytes), src, bytes);
        weft_shm_head_publish_msg(op, WEFT_SHM_RESULT, bad ? WEFT_SHM_SIG_BAD : weft_shm_head(op, from)->sig);
        src = weft_shm_buf(op, sh->me, bytes);
    }
    if (bad) return bad;
    memcpy(dst, src, bytes);
    return 1;
}

int weft_shm_wait_heads_each(weft_sched_t *s, weft_shm_op_t *op, int ev, const int *ranks, int count,
                             unsigned char *got, weft_shm_seen_fn fn, void *arg, const char *flag)
{
    weft_shm_t *sh = op->sh;
    uint64_t want = 2 * op->k + (uint64_t)ev;
    int late = -1;
    if (!ranks) count = sh->n;
    if (WEFT_UNLIKELY(weft_sched_posting(s)) && op->seen < count) { /* as weft_shm_wait */
        weft_shm_waiting(s, op->sh, ranks ? ranks[op->seen] : op->seen, flag);
        return 0;
    }
    for (int i = op->seen; i < count; i++) {
        if (got && got[i]) continue;
        int r = ranks ? ranks[i] : i;
        if (atomic_load_explicit(&weft_shm_head(op, r)->seq, memory_order_acquire) >= want) {
            if (got) {
                got[i] = 1;
                fn(arg, r);
            }
        } else if (late < 0) {
            late = i;
        }
    }
    if (late < 0) {
        op->seen = 0;
        if (got) memset(got, 0, (size_t)count);
        if (!ranks) weft_shm_all_started(sh, op->k);
        return 1;
    }
    op->seen = late;
    weft_shm_waiting(s, op->sh, ranks ? ranks[late] : late, flag);
    return 0;
}

int weft_shm_wait_children(weft_sched_t *s, weft_shm_op_t *op, int root, const char *flag)
{
    weft_shm_t *sh = op->sh;
    uint64_t want = 2 * op->k + WEFT_SHM_PARTIAL;
    int v = weft_shm_vrank(sh, root), late = -1;
    /* Every child's word loaded before any is judged: the misses overlap. */
    WEFT_SHM_FOR_CHILDREN(sh, v, root, c, {
        if (atomic_load_explicit(&weft_shm_head(op, c)->seq, memory_order_acquire) < want && late < 0) late = c;
    });
    if (late < 0) {
        WEFT_SHM_FOR_CHILDREN(sh, v, root, c, {
            if (sh->seen_done[c] < op->k) sh->seen_done[c] = op->k; /* in k: done >= k (weft_shm_head_wait) */
        });
        if (v == 0) weft_shm_all_started(sh, op->k); /* the root: every member's partial is in */
        return 1;
    }
    weft_shm_waiting(s, sh, late, flag);
    return 0;
}

int weft_shm_wait_done_children(weft_sched_t *s, weft_shm_op_t *op, int root, int radix)
{
    return children_done(s, op->sh, weft_shm_vrank(op->sh, root), root, radix, op->k + 1);
}

void *weft_shm_op_alloc(weft_sched_t *s, weft_shm_t *sh, size_t size, size_t extra, const char *alg)
{
    size_t head = weft_shm_op_head(size);
    weft_shm_op_t *op = weft_sched_scratch(s, head + extra);
    if (!op) {
        weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory (%zu bytes)", alg, head + extra);
        return NULL;
    }
    memset(op, 0, size);
    op->sh = sh;
    op->sched = s;
    op->k = UINT64_MAX;
    op->nk = 1;
    weft_sched_watch(s, &shm_watch, op);
    return op;
}

void weft_shm_comm_release(weft_comm_t comm, void *state)
{
    (void)comm;
    weft_shm_t *sh = state;
    /* A member never attached (it died, or timed out): the name is still
     * there, and the creator removes it. */
    if (sh->me == 0 && sh->mapped &&
        atomic_load_explicit(&((shm_header_t *)sh->base)->attached, memory_order_acquire) < (uint32_t)sh->n)
        shm_unlink(sh->name);
    if (sh->base) {
        weft_progress_bell_unmap(sh->base, sh->len);
        munmap(sh->base, sh->len);
    }
    free(sh->seen_done);
    free(sh);
}

/* Whether the file open at fd (name in /dev/shm) is a segment this user's
 * dead run left behind. */
static int stale_segment(int fd, const struct stat *st, uint64_t host, time_t now)
{
    if ((size_t)st->st_size < sizeof(shm_header_t))
        return now - st->st_mtime > 60; /* its creator died before sizing it */
    shm_header_t h;                     /* read, not mapped: a page with no space behind it would raise SIGBUS */
    if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) return 0;
    if (h.ready == SHM_MAGIC) return h.host_id == host && kill((pid_t)h.creator_pid, 0) && errno == ESRCH;
    return now - st->st_mtime > 60;
}

/* The sweep's budget: stale segments are rare (a name is unlinked once every
 * member mapped it), while any user can fill /dev/shm with junk names. */
#define SWEEP_MAX_S       0.1
#define SWEEP_MAX_ENTRIES 20000

/* 1 when the name after "weft-" is one of this host's segments':
 * <job>-<host>-..., <host> this host's id (16 hex digits each). */
static int our_segment_name(const char *job, const char *host_hex)
{
    for (int i = 0; i < 16; i++)
        if (!strchr("0123456789abcdef", job[i]) || !job[i]) return 0;
    return job[16] == '-' && !strncmp(job + 17, host_hex, 16) && job[33] == '-';
}

/* Any local user can put anything under a weft- name in /dev/shm: only
 * names of this host's segments are looked at, only this user's regular
 * files (by fstatat, before any open) are opened, without blocking (a
 * FIFO put in place since) and without following a link; the rest are
 * skipped. One rank per node sweeps, within a budget of time and entries. */
int weft_shm_sweep(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    uint64_t host = weft_topo_host_id();
    char host_hex[17];
    snprintf(host_hex, sizeof(host_hex), "%016llx", (unsigned long long)host);
    int removed = 0, dfd = dirfd(d), seen = 0;
    time_t now = time(NULL);
    double t0 = weft_wtime();
    uid_t me = geteuid();
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "weft-", 5)) continue;
        if (++seen > SWEEP_MAX_ENTRIES || (seen % 256 == 0 && weft_wtime() - t0 > SWEEP_MAX_S)) {
            weft_debug("coll/shm: sweep: stopped after %d weft- entries in /dev/shm (%.2f s): its budget is spent",
                       seen, weft_wtime() - t0);
            break;
        }
        if (!our_segment_name(e->d_name + 5, host_hex)) continue;
        if (e->d_type != DT_UNKNOWN && e->d_type != DT_REG) {
            weft_debug("coll/shm: sweep: skipping /dev/shm/%s: not a regular file", e->d_name);
            continue;
        }
        struct stat st, now_st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode) || st.st_uid != me) {
            weft_debug("coll/shm: sweep: skipping /dev/shm/%s: not a regular file of uid %u", e->d_name, (unsigned)me);
            continue;
        }
        int fd = openat(dfd, e->d_name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
            weft_debug("coll/shm: sweep: skipping /dev/shm/%s: %s", e->d_name, strerror(errno));
            continue;
        }
        int stale = 0;
        if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != me)
            weft_debug("coll/shm: sweep: skipping /dev/shm/%s: not a regular file of uid %u", e->d_name, (unsigned)me);
        else
            stale = stale_segment(fd, &st, host, now);
        close(fd);
        /* still the file judged (not one put in its place since) */
        if (stale && !fstatat(dfd, e->d_name, &now_st, AT_SYMLINK_NOFOLLOW) && now_st.st_ino == st.st_ino &&
            now_st.st_dev == st.st_dev && !unlinkat(dfd, e->d_name, 0)) {
            removed++;
            weft_debug("coll/shm: removed stale segment /dev/shm/%s (its creator is gone)", e->d_name);
        }
    }
    closedir(d);
    return removed;
}
