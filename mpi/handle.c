/* Handle slabs: every object of one kind lives in one reserved range of
 * address space, in slots of one size. A handle is valid when it points
 * at a slot inside the part in use and the slot carries the kind's live
 * magic, so a garbage or freed handle is an error, never a wild read. The
 * range is reserved without access and made writable as it fills; a
 * freed slot goes on a free list (its magic says freed until reused). */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SLAB_RESERVE (UINT64_C(1) << 32) /* address space per kind; memory only as slots are used */
#define SLAB_STEP    (UINT64_C(1) << 20)

typedef struct slab {
    char *base;
    size_t slot;
    size_t used;      /* bytes handed out by the bump pointer */
    size_t committed; /* bytes made writable */
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

static int slab_reserve(slab_t *s, enum mpi_kind kind)
{
    if (s->base) return 0;
    void *p = mmap(NULL, SLAB_RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -1;
    s->base = p;
    /* 16-byte slots keep every field aligned whatever the struct's size */
    s->slot = (slot_size[kind] + 15) & ~(size_t)15;
    return 0;
}

void *mpi_obj_alloc(enum mpi_kind kind)
{
    slab_t *s = &slabs[kind];
    mpi_obj_t *o;
    if (s->free_list) {
        o = s->free_list;
        s->free_list = *(void **)(o + 1);
    } else {
        if (slab_reserve(s, kind)) return NULL;
        if (s->used + s->slot > s->committed) {
            if (s->committed + SLAB_STEP > SLAB_RESERVE) return NULL;
            if (mprotect(s->base + s->committed, SLAB_STEP, PROT_READ | PROT_WRITE)) return NULL;
            s->committed += SLAB_STEP;
        }
        o = (mpi_obj_t *)(s->base + s->used);
        s->used += s->slot;
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

void *mpi_obj_check(enum mpi_kind kind, const void *p)
{
    const slab_t *s = &slabs[kind];
    uintptr_t off = (uintptr_t)p - (uintptr_t)s->base;
    if (MPI_UNLIKELY(!s->base || off >= s->used || off % s->slot)) return NULL;
    mpi_obj_t *o = (mpi_obj_t *)p;
    return o->magic == MPI_MAGIC_BASE + (uint32_t)kind ? o : NULL;
}

int mpi_obj_index(enum mpi_kind kind, const void *p)
{
    const slab_t *s = &slabs[kind];
    if (!mpi_obj_check(kind, p)) return -1;
    size_t i = ((uintptr_t)p - (uintptr_t)s->base) / s->slot;
    return i > (size_t)(INT32_MAX - MPI_HANDLE_INT_BASE) ? -1 : (int)i;
}

void *mpi_obj_at(enum mpi_kind kind, int index)
{
    const slab_t *s = &slabs[kind];
    if (index < 0 || !s->base) return NULL;
    return mpi_obj_check(kind, s->base + (size_t)index * s->slot);
}

void mpi_obj_foreach(enum mpi_kind kind, void (*fn)(void *obj, void *arg), void *arg)
{
    const slab_t *s = &slabs[kind];
    for (size_t off = 0; s->base && off < s->used; off += s->slot) {
        mpi_obj_t *o = (mpi_obj_t *)(s->base + off);
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
