/* Handle slabs: every object of one kind lives in reserved ranges of
 * address space (chunks), in slots of one size. A handle is valid when it
 * points at a slot of a chunk of its kind, inside the part in use, and the
 * slot carries the kind's live magic, so a garbage or freed handle is an
 * error, never a wild read. A chunk is reserved without access and made
 * writable as it fills (address space only where an RLIMIT_AS is set); a
 * kind takes another chunk when one is full. A freed slot goes on a free
 * list, its magic saying freed until it is reused. */
#include "mpi_impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHUNK_BYTES (UINT64_C(64) << 20) /* address space per chunk */
#define CHUNK_STEP  (UINT64_C(1) << 20)  /* made writable at a time */
#define MAX_CHUNKS  64

typedef struct chunk {
    char *base;
    size_t used;      /* bytes handed out by the bump pointer */
    size_t committed; /* bytes made writable */
} chunk_t;

typedef struct slab {
    chunk_t chunks[MAX_CHUNKS];
    int nchunks;
    size_t slot;
    size_t per_chunk; /* slots in a chunk */
    void *free_list;  /* freed slots: the word after the head links them */
} slab_t;

static slab_t slabs[MPI_K_COUNT];
static const size_t slot_size[MPI_K_COUNT] = {
    [MPI_K_COMM] = sizeof(struct MPI_ABI_Comm),
    [MPI_K_GROUP] = sizeof(struct MPI_ABI_Group),
    [MPI_K_DTYPE] = sizeof(struct MPI_ABI_Datatype),
    [MPI_K_OP] = sizeof(struct MPI_ABI_Op),
    [MPI_K_REQUEST] = sizeof(struct MPI_ABI_Request),
    [MPI_K_INFO] = sizeof(struct MPI_ABI_Info),
    [MPI_K_ERRH] = sizeof(struct MPI_ABI_Errhandler),
    [MPI_K_MESSAGE] = sizeof(struct MPI_ABI_Message),
    [MPI_K_KEYVAL] = sizeof(mpi_keyval_t),
    [MPI_K_SESSION] = sizeof(struct MPI_ABI_Session),
};

static chunk_t *chunk_add(slab_t *s, enum mpi_kind kind)
{
    if (s->nchunks == MAX_CHUNKS) return NULL;
    void *p = mmap(NULL, CHUNK_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (!s->slot) {
        /* 16-byte slots keep every field aligned whatever the struct's size */
        s->slot = (slot_size[kind] + 15) & ~(size_t)15;
        s->per_chunk = CHUNK_BYTES / s->slot;
    }
    chunk_t *c = &s->chunks[s->nchunks++];
    c->base = p;
    c->used = c->committed = 0;
    return c;
}

void *mpi_obj_alloc(enum mpi_kind kind)
{
    slab_t *s = &slabs[kind];
    mpi_obj_t *o;
    if (s->free_list) {
        o = s->free_list;
        s->free_list = *(void **)(o + 1);
    } else {
        chunk_t *c = s->nchunks ? &s->chunks[s->nchunks - 1] : NULL;
        if (!c || c->used + s->slot > s->per_chunk * s->slot) c = chunk_add(s, kind);
        if (!c) return NULL;
        if (c->used + s->slot > c->committed) {
            size_t step = CHUNK_STEP < CHUNK_BYTES - c->committed ? CHUNK_STEP : CHUNK_BYTES - c->committed;
            if (mprotect(c->base + c->committed, step, PROT_READ | PROT_WRITE)) return NULL;
            c->committed += step;
        }
        o = (mpi_obj_t *)(c->base + c->used);
        c->used += s->slot;
    }
    memset(o, 0, s->slot);
    o->magic = MPI_MAGIC_BASE + (uint32_t)kind;
    o->refs = 1;
    return o;
}

void mpi_obj_release(enum mpi_kind kind, void *obj)
{
    slab_t *s = &slabs[kind];
    mpi_obj_t *o = obj;
    o->magic = MPI_MAGIC_FREED;
    o->refs = 0;
    *(void **)(o + 1) = s->free_list;
    s->free_list = o;
}

void mpi_obj_retire(void *obj)
{
    ((mpi_obj_t *)obj)->magic = MPI_MAGIC_RETIRED;
}

/* The chunk holding p at a slot boundary, and the slot's index in it. */
static const chunk_t *find(const slab_t *s, const void *p, size_t *slot)
{
    for (int i = 0; i < s->nchunks; i++) {
        const chunk_t *c = &s->chunks[i];
        uintptr_t off = (uintptr_t)p - (uintptr_t)c->base;
        if (off < c->used) {
            if (off % s->slot) return NULL;
            *slot = (size_t)i * s->per_chunk + off / s->slot;
            return c;
        }
    }
    return NULL;
}

void *mpi_obj_check(enum mpi_kind kind, const void *p)
{
    const slab_t *s = &slabs[kind];
    size_t slot;
    if (MPI_UNLIKELY(!find(s, p, &slot))) return NULL;
    mpi_obj_t *o = (mpi_obj_t *)p;
    return o->magic == MPI_MAGIC_BASE + (uint32_t)kind ? o : NULL;
}

int mpi_obj_index(enum mpi_kind kind, const void *p)
{
    size_t slot;
    if (!mpi_obj_check(kind, p) || !find(&slabs[kind], p, &slot)) return -1;
    return slot > (size_t)(INT32_MAX - MPI_HANDLE_INT_BASE) ? -1 : (int)slot;
}

void *mpi_obj_at(enum mpi_kind kind, int index)
{
    const slab_t *s = &slabs[kind];
    if (index < 0 || !s->nchunks) return NULL;
    size_t i = (size_t)index / s->per_chunk, k = (size_t)index % s->per_chunk;
    if (i >= (size_t)s->nchunks) return NULL;
    return mpi_obj_check(kind, s->chunks[i].base + k * s->slot);
}

void mpi_obj_foreach(enum mpi_kind kind, void (*fn)(void *obj, void *arg), void *arg)
{
    const slab_t *s = &slabs[kind];
    for (int i = 0; i < s->nchunks; i++)
        for (size_t off = 0; off < s->chunks[i].used; off += s->slot) {
            mpi_obj_t *o = (mpi_obj_t *)(s->chunks[i].base + off);
            if (o->magic == MPI_MAGIC_BASE + (uint32_t)kind) fn(o, arg);
        }
}

void *mpi_malloc(size_t n)
{
    return malloc(n ? n : 1);
}

int mpi_count_to_int(MPI_Count c, int *out)
{
    if (c > INT32_MAX || c < INT32_MIN) {
        *out = MPI_UNDEFINED;
        return 0;
    }
    *out = (int)c;
    return 1;
}
