/* Groups: ordered lists of world ranks, all local. */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct MPI_ABI_Group group_empty = {.h = {MPI_MAGIC_BASE + MPI_K_GROUP, 1}, .size = 0, .rank = MPI_UNDEFINED};

struct MPI_ABI_Group *mpi_group_get(MPI_Group h)
{
    if (h == MPI_GROUP_EMPTY) return &group_empty;
    if ((uintptr_t)h < MPI_HANDLE_INT_BASE) return NULL;
    return mpi_obj_check(MPI_K_GROUP, h);
}

static int my_world_rank(void)
{
    return mpi_comm_world_obj.rank;
}

struct MPI_ABI_Group *mpi_group_new(int size)
{
    struct MPI_ABI_Group *g = mpi_obj_alloc(MPI_K_GROUP);
    if (!g) return NULL;
    g->size = size;
    g->rank = MPI_UNDEFINED;
    g->world = malloc(sizeof(int) * (size_t)(size ? size : 1));
    if (!g->world) {
        mpi_obj_release(MPI_K_GROUP, g);
        return NULL;
    }
    return g;
}

static void group_set_rank(struct MPI_ABI_Group *g)
{
    int me = my_world_rank();
    g->rank = MPI_UNDEFINED;
    for (int i = 0; i < g->size; i++)
        if (g->world[i] == me) {
            g->rank = i;
            break;
        }
}

void mpi_group_unref(struct MPI_ABI_Group *g)
{
    if (!g || g == &group_empty || --g->h.refs > 0) return;
    free(g->world);
    mpi_obj_release(MPI_K_GROUP, g);
}

/* A new group from a list of world ranks (size 0: MPI_GROUP_EMPTY). */
static int group_out(const int *world, int n, MPI_Group *out, const char *fn)
{
    if (n == 0) {
        *out = MPI_GROUP_EMPTY;
        return MPI_SUCCESS;
    }
    struct MPI_ABI_Group *g = mpi_group_new(n);
    if (!g) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    memcpy(g->world, world, sizeof(int) * (size_t)n);
    group_set_rank(g);
    *out = g;
    return MPI_SUCCESS;
}

static int check_group(MPI_Group h, const char *fn, struct MPI_ABI_Group **out)
{
    *out = mpi_group_get(h);
    if (*out) return MPI_SUCCESS;
    if (mpi_state != 1) MPI_CHECK_INIT(fn);
    return mpi_err(NULL, MPI_ERR_GROUP, fn, "%s", h == MPI_GROUP_NULL ? "MPI_GROUP_NULL" : "invalid group handle");
}

MPI_DEF(int, Comm_group, (MPI_Comm comm, MPI_Group *group))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_group", &c);
    if (rc) return rc;
    if (!group) return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_group", "NULL output");
    return group_out(c->world, c->size, group, "MPI_Comm_group");
}

MPI_DEF(int, Group_size, (MPI_Group group, int *size))
{
    struct MPI_ABI_Group *g;
    int rc = check_group(group, "MPI_Group_size", &g);
    if (rc) return rc;
    if (!size) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Group_size", "NULL output");
    *size = g->size;
    return MPI_SUCCESS;
}

MPI_DEF(int, Group_rank, (MPI_Group group, int *rank))
{
    struct MPI_ABI_Group *g;
    int rc = check_group(group, "MPI_Group_rank", &g);
    if (rc) return rc;
    if (!rank) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Group_rank", "NULL output");
    *rank = g->rank;
    return MPI_SUCCESS;
}

MPI_DEF(int, Group_free, (MPI_Group * group))
{
    if (!group) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Group_free", "NULL handle pointer");
    struct MPI_ABI_Group *g;
    int rc = check_group(*group, "MPI_Group_free", &g);
    if (rc) return rc;
    mpi_group_unref(g);
    *group = MPI_GROUP_NULL;
    return MPI_SUCCESS;
}

static int index_of(const struct MPI_ABI_Group *g, int world)
{
    for (int i = 0; i < g->size; i++)
        if (g->world[i] == world) return i;
    return MPI_UNDEFINED;
}

MPI_DEF(int, Group_translate_ranks, (MPI_Group group1, int n, const int ranks1[], MPI_Group group2, int ranks2[]))
{
    const char *fn = "MPI_Group_translate_ranks";
    struct MPI_ABI_Group *a, *b;
    int rc = check_group(group1, fn, &a);
    if (rc || (rc = check_group(group2, fn, &b))) return rc;
    if (n < 0) return mpi_err(NULL, MPI_ERR_ARG, fn, "negative n");
    if (n > 0 && (!ranks1 || !ranks2)) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL rank array");
    for (int i = 0; i < n; i++) {
        if (ranks1[i] == MPI_PROC_NULL) {
            ranks2[i] = MPI_PROC_NULL;
            continue;
        }
        if (ranks1[i] < 0 || ranks1[i] >= a->size)
            return mpi_err(NULL, MPI_ERR_RANK, fn, "rank %d out of range 0..%d", ranks1[i], a->size - 1);
        ranks2[i] = index_of(b, a->world[ranks1[i]]);
    }
    return MPI_SUCCESS;
}

MPI_DEF(int, Group_compare, (MPI_Group group1, MPI_Group group2, int *result))
{
    struct MPI_ABI_Group *a, *b;
    int rc = check_group(group1, "MPI_Group_compare", &a);
    if (rc || (rc = check_group(group2, "MPI_Group_compare", &b))) return rc;
    if (!result) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Group_compare", "NULL result");
    if (a->size != b->size) {
        *result = MPI_UNEQUAL;
    } else if (a->size == 0 || !memcmp(a->world, b->world, sizeof(int) * (size_t)a->size)) {
        *result = MPI_IDENT;
    } else {
        *result = MPI_SIMILAR;
        for (int i = 0; i < a->size; i++)
            if (index_of(b, a->world[i]) == MPI_UNDEFINED) {
                *result = MPI_UNEQUAL;
                break;
            }
    }
    return MPI_SUCCESS;
}

/* Set operations keep the order MPI specifies: first group's order, then
 * the second's members not in the first. */
static int setop(MPI_Group group1, MPI_Group group2, MPI_Group *out, int op, const char *fn)
{
    struct MPI_ABI_Group *a, *b;
    int rc = check_group(group1, fn, &a);
    if (rc || (rc = check_group(group2, fn, &b))) return rc;
    if (!out) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL output");
    int *w = malloc(sizeof(int) * (size_t)(a->size + b->size + 1)), n = 0;
    if (!w) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    for (int i = 0; i < a->size; i++) {
        int inb = index_of(b, a->world[i]) != MPI_UNDEFINED;
        if (op == 'u' || (op == 'i' && inb) || (op == 'd' && !inb)) w[n++] = a->world[i];
    }
    if (op == 'u')
        for (int i = 0; i < b->size; i++)
            if (index_of(a, b->world[i]) == MPI_UNDEFINED) w[n++] = b->world[i];
    rc = group_out(w, n, out, fn);
    free(w);
    return rc;
}

MPI_DEF(int, Group_union, (MPI_Group group1, MPI_Group group2, MPI_Group *newgroup))
{
    return setop(group1, group2, newgroup, 'u', "MPI_Group_union");
}

MPI_DEF(int, Group_intersection, (MPI_Group group1, MPI_Group group2, MPI_Group *newgroup))
{
    return setop(group1, group2, newgroup, 'i', "MPI_Group_intersection");
}

MPI_DEF(int, Group_difference, (MPI_Group group1, MPI_Group group2, MPI_Group *newgroup))
{
    return setop(group1, group2, newgroup, 'd', "MPI_Group_difference");
}

/* Ranks must be valid and distinct. */
static int check_ranks(struct MPI_ABI_Group *g, int n, const int ranks[], const char *fn)
{
    if (n < 0 || n > g->size) return mpi_err(NULL, MPI_ERR_ARG, fn, "n = %d out of range 0..%d", n, g->size);
    if (n > 0 && !ranks) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL ranks");
    char *seen = calloc((size_t)g->size + 1, 1);
    if (!seen) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= g->size || seen[ranks[i]]) {
            int r = ranks[i];
            free(seen);
            return mpi_err(NULL, MPI_ERR_RANK, fn, "rank %d %s", r,
                           r < 0 || r >= g->size ? "out of range" : "given twice");
        }
        seen[ranks[i]] = 1;
    }
    free(seen);
    return MPI_SUCCESS;
}

static int incl_excl(MPI_Group group, int n, const int ranks[], MPI_Group *newgroup, int excl, const char *fn)
{
    struct MPI_ABI_Group *g;
    int rc = check_group(group, fn, &g);
    if (rc || (rc = check_ranks(g, n, ranks, fn))) return rc;
    if (!newgroup) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL output");
    int *w = malloc(sizeof(int) * (size_t)(g->size + 1)), m = 0;
    if (!w) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    if (!excl) {
        for (int i = 0; i < n; i++)
            w[m++] = g->world[ranks[i]];
    } else {
        for (int i = 0; i < g->size; i++) {
            int drop = 0;
            for (int j = 0; j < n && !drop; j++)
                drop = ranks[j] == i;
            if (!drop) w[m++] = g->world[i];
        }
    }
    rc = group_out(w, m, newgroup, fn);
    free(w);
    return rc;
}

MPI_DEF(int, Group_incl, (MPI_Group group, int n, const int ranks[], MPI_Group *newgroup))
{
    return incl_excl(group, n, ranks, newgroup, 0, "MPI_Group_incl");
}

MPI_DEF(int, Group_excl, (MPI_Group group, int n, const int ranks[], MPI_Group *newgroup))
{
    return incl_excl(group, n, ranks, newgroup, 1, "MPI_Group_excl");
}

/* Expands (first, last, stride) triplets into a rank list. */
static int expand_ranges(struct MPI_ABI_Group *g, int n, int ranges[][3], int **out, int *count, const char *fn)
{
    if (n < 0) return mpi_err(NULL, MPI_ERR_ARG, fn, "negative n");
    if (n > 0 && !ranges) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL ranges");
    int m = 0;
    int *list = malloc(sizeof(int) * (size_t)(g->size + 1));
    if (!list) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    for (int i = 0; i < n; i++) {
        int first = ranges[i][0], last = ranges[i][1], stride = ranges[i][2];
        if (stride == 0) {
            free(list);
            return mpi_err(NULL, MPI_ERR_ARG, fn, "range %d (%d, %d, 0) has stride 0", i, first, last);
        }
        if (first < 0 || first >= g->size || last < 0 || last >= g->size) {
            free(list);
            return mpi_err(NULL, MPI_ERR_RANK, fn, "invalid range (%d, %d, %d)", first, last, stride);
        }
        /* 64 bits: a large stride steps past INT_MAX */
        for (int64_t r = first; stride > 0 ? r <= last : r >= last; r += stride) {
            if (m >= g->size) {
                free(list);
                return mpi_err(NULL, MPI_ERR_RANK, fn, "ranges name a rank twice");
            }
            list[m++] = (int)r;
        }
    }
    *out = list;
    *count = m;
    return MPI_SUCCESS;
}

static int range_incl_excl(MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup, int excl, const char *fn)
{
    struct MPI_ABI_Group *g;
    int rc = check_group(group, fn, &g);
    if (rc) return rc;
    int *list, m;
    if ((rc = expand_ranges(g, n, ranges, &list, &m, fn))) return rc;
    rc = incl_excl(group, m, list, newgroup, excl, fn);
    free(list);
    return rc;
}

MPI_DEF(int, Group_range_incl, (MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup))
{
    return range_incl_excl(group, n, ranges, newgroup, 0, "MPI_Group_range_incl");
}

MPI_DEF(int, Group_range_excl, (MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup))
{
    return range_incl_excl(group, n, ranges, newgroup, 1, "MPI_Group_range_excl");
}

MPI_DEF(MPI_Group, Group_fromint, (int group))
{
    if (group == 0x108 || group == 0x109) return (MPI_Group)(uintptr_t)group;
    void *o = mpi_obj_at(MPI_K_GROUP, group - MPI_HANDLE_INT_BASE);
    return o ? o : MPI_GROUP_NULL;
}

MPI_DEF(int, Group_toint, (MPI_Group group))
{
    uintptr_t v = (uintptr_t)group;
    if (v < MPI_HANDLE_INT_BASE) return (int)v;
    int i = mpi_obj_index(MPI_K_GROUP, group);
    return i < 0 ? 0x108 : MPI_HANDLE_INT_BASE + i;
}
