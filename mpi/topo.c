/* Process topologies: Cartesian grids, graphs and distributed graphs,
 * kept beside a communicator made by a split (no reordering: weft places
 * ranks already). Dims_create balances factors as MPI asks. */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mpi_topo_free(mpi_topo_t *t)
{
    if (!t) return;
    free(t->dims), free(t->periods), free(t->index), free(t->edges);
    free(t->sources), free(t->sourceweights), free(t->dests), free(t->destweights);
    free(t);
}

static int *dup_ints(const int *a, int n)
{
    if (!a || n <= 0) return NULL;
    int *r = malloc(sizeof(int) * (size_t)n);
    if (r) memcpy(r, a, sizeof(int) * (size_t)n);
    return r;
}

mpi_topo_t *mpi_topo_dup(const mpi_topo_t *t)
{
    mpi_topo_t *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    *d = *t;
    d->dims = dup_ints(t->dims, t->ndims);
    d->periods = dup_ints(t->periods, t->ndims);
    d->index = dup_ints(t->index, t->nnodes);
    d->edges = dup_ints(t->edges, t->nedges);
    d->sources = dup_ints(t->sources, t->indegree);
    d->sourceweights = dup_ints(t->sourceweights, t->indegree);
    d->dests = dup_ints(t->dests, t->outdegree);
    d->destweights = dup_ints(t->destweights, t->outdegree);
    return d;
}

static int check_topo(MPI_Comm comm, int kind, const char *fn, struct MPI_ABI_Comm **c)
{
    int rc = mpi_check_comm(comm, fn, c);
    if (rc) return rc;
    if (!(*c)->topo || (kind && (*c)->topo->kind != kind))
        return mpi_err(*c, MPI_ERR_TOPOLOGY, fn, "the communicator has no %s topology",
                       kind == MPI_CART    ? "Cartesian"
                       : kind == MPI_GRAPH ? "graph"
                       : kind              ? "distributed graph"
                                           : "");
    return MPI_SUCCESS;
}

MPI_DEF(int, Topo_test, (MPI_Comm comm, int *status))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Topo_test", &c);
    if (rc) return rc;
    if (!status) return mpi_err(c, MPI_ERR_ARG, "MPI_Topo_test", "NULL status");
    *status = c->topo ? c->topo->kind : MPI_UNDEFINED;
    return MPI_SUCCESS;
}

/* The first `nnodes` ranks of comm (in order) form the new communicator. */
static int topo_split(struct MPI_ABI_Comm *c, int nnodes, mpi_topo_t *t, MPI_Comm *out, const char *fn)
{
    weft_comm_t wc;
    int in = c->rank < nnodes;
    int rc = weft_comm_split(c->wc, in ? 0 : MPI_UNDEFINED, c->rank, WEFT_OPTIONS_NULL, &wc);
    if (rc) {
        mpi_topo_free(t);
        return mpi_err_weft(c, rc, fn);
    }
    if ((rc = mpi_comm_wrap(c, wc, out, fn))) {
        mpi_topo_free(t);
        return rc;
    }
    if (*out == MPI_COMM_NULL) {
        mpi_topo_free(t);
        return MPI_SUCCESS;
    }
    ((struct MPI_ABI_Comm *)*out)->topo = t;
    return MPI_SUCCESS;
}

/* ---- Cartesian ------------------------------------------------------------------- */

MPI_DEF(int, Cart_create,
        (MPI_Comm comm_old, int ndims, const int dims[], const int periods[], int reorder, MPI_Comm *comm_cart))
{
    const char *fn = "MPI_Cart_create";
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm_old, fn, &c);
    if (rc) return rc;
    (void)reorder;
    if (!comm_cart) return mpi_err(c, MPI_ERR_ARG, fn, "NULL comm_cart");
    *comm_cart = MPI_COMM_NULL; /* on any error */
    if (ndims < 0 || (ndims > 0 && (!dims || !periods)))
        return mpi_err(c, MPI_ERR_ARG, fn, "invalid ndims %d, or NULL dims or periods", ndims);
    long long nnodes = 1;
    for (int i = 0; i < ndims; i++) {
        if (dims[i] <= 0) return mpi_err(c, MPI_ERR_DIMS, fn, "dims[%d] = %d is not positive", i, dims[i]);
        nnodes *= dims[i];
    }
    if (nnodes > c->size)
        return mpi_err(c, MPI_ERR_DIMS, fn, "the grid has %lld nodes, the communicator %d ranks", nnodes, c->size);
    mpi_topo_t *t = calloc(1, sizeof(*t));
    if (!t) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
    t->kind = MPI_CART;
    t->ndims = ndims;
    if (ndims > 0) {
        t->dims = dup_ints(dims, ndims);
        t->periods = malloc(sizeof(int) * (size_t)ndims);
        if (!t->dims || !t->periods) {
            mpi_topo_free(t);
            return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
        }
        for (int i = 0; i < ndims; i++)
            t->periods[i] = periods[i] != 0;
    }
    return topo_split(c, (int)nnodes, t, comm_cart, fn);
}

static void coords_of(const mpi_topo_t *t, int rank, int *coords)
{
    for (int i = t->ndims - 1; i >= 0; i--) {
        coords[i] = rank % t->dims[i];
        rank /= t->dims[i];
    }
}

MPI_DEF(int, Cartdim_get, (MPI_Comm comm, int *ndims))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_CART, "MPI_Cartdim_get", &c);
    if (rc) return rc;
    if (!ndims) return mpi_err(c, MPI_ERR_ARG, "MPI_Cartdim_get", "NULL output");
    *ndims = c->topo->ndims;
    return MPI_SUCCESS;
}

MPI_DEF(int, Cart_get, (MPI_Comm comm, int maxdims, int dims[], int periods[], int coords[]))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_CART, "MPI_Cart_get", &c);
    if (rc) return rc;
    mpi_topo_t *t = c->topo;
    if (maxdims < t->ndims || (t->ndims > 0 && (!dims || !periods || !coords)))
        return mpi_err(c, MPI_ERR_ARG, "MPI_Cart_get", "maxdims %d < %d or NULL output", maxdims, t->ndims);
    for (int i = 0; i < t->ndims; i++) {
        dims[i] = t->dims[i];
        periods[i] = t->periods[i];
    }
    if (t->ndims > 0) coords_of(t, c->rank, coords);
    return MPI_SUCCESS;
}

MPI_DEF(int, Cart_rank, (MPI_Comm comm, const int coords[], int *rank))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_CART, "MPI_Cart_rank", &c);
    if (rc) return rc;
    mpi_topo_t *t = c->topo;
    if (!rank || (t->ndims > 0 && !coords)) return mpi_err(c, MPI_ERR_ARG, "MPI_Cart_rank", "NULL argument");
    int r = 0;
    for (int i = 0; i < t->ndims; i++) {
        int x = coords[i];
        if (t->periods[i]) {
            x %= t->dims[i];
            if (x < 0) x += t->dims[i];
        } else if (x < 0 || x >= t->dims[i]) {
            return mpi_err(c, MPI_ERR_RANK, "MPI_Cart_rank", "coordinate %d = %d out of range 0..%d", i, x,
                           t->dims[i] - 1);
        }
        r = r * t->dims[i] + x;
    }
    *rank = r;
    return MPI_SUCCESS;
}

MPI_DEF(int, Cart_coords, (MPI_Comm comm, int rank, int maxdims, int coords[]))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_CART, "MPI_Cart_coords", &c);
    if (rc) return rc;
    mpi_topo_t *t = c->topo;
    if (rank < 0 || rank >= c->size) return mpi_err(c, MPI_ERR_RANK, "MPI_Cart_coords", "rank %d out of range", rank);
    if (maxdims < t->ndims || (t->ndims > 0 && !coords))
        return mpi_err(c, MPI_ERR_ARG, "MPI_Cart_coords", "maxdims %d < %d or NULL coords", maxdims, t->ndims);
    coords_of(t, rank, coords);
    return MPI_SUCCESS;
}

MPI_DEF(int, Cart_shift, (MPI_Comm comm, int direction, int disp, int *rank_source, int *rank_dest))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_CART, "MPI_Cart_shift", &c);
    if (rc) return rc;
    mpi_topo_t *t = c->topo;
    if (direction < 0 || direction >= t->ndims)
        return mpi_err(c, MPI_ERR_ARG, "MPI_Cart_shift", "direction %d out of range 0..%d", direction, t->ndims - 1);
    if (!rank_source || !rank_dest) return mpi_err(c, MPI_ERR_ARG, "MPI_Cart_shift", "NULL output");
    int coords[64], *co = t->ndims <= 64 ? coords : malloc(sizeof(int) * (size_t)t->ndims);
    if (!co) return mpi_err(c, MPI_ERR_NO_MEM, "MPI_Cart_shift", "out of memory");
    int out[2];
    for (int k = 0; k < 2; k++) {
        coords_of(t, c->rank, co);
        int x = co[direction] + (k == 0 ? -disp : disp), d = t->dims[direction];
        if (t->periods[direction]) {
            x %= d;
            if (x < 0) x += d;
        } else if (x < 0 || x >= d) {
            out[k] = MPI_PROC_NULL;
            continue;
        }
        co[direction] = x;
        int r = 0;
        for (int i = 0; i < t->ndims; i++)
            r = r * t->dims[i] + co[i];
        out[k] = r;
    }
    if (co != coords) free(co);
    *rank_source = out[0];
    *rank_dest = out[1];
    return MPI_SUCCESS;
}

MPI_DEF(int, Cart_sub, (MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm))
{
    const char *fn = "MPI_Cart_sub";
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_CART, fn, &c);
    if (rc) return rc;
    mpi_topo_t *t = c->topo;
    if (!newcomm) return mpi_err(c, MPI_ERR_ARG, fn, "NULL newcomm");
    *newcomm = MPI_COMM_NULL; /* on any error */
    if (t->ndims > 0 && !remain_dims) return mpi_err(c, MPI_ERR_ARG, fn, "NULL remain_dims");
    int coords[64];
    if (t->ndims > 64) return mpi_err(c, MPI_ERR_DIMS, fn, "more than 64 dimensions");
    coords_of(t, c->rank, coords);
    /* color: the coordinates dropped; key: the coordinates kept */
    int color = 0, key = 0, nd = 0;
    for (int i = 0; i < t->ndims; i++) {
        if (remain_dims[i]) {
            key = key * t->dims[i] + coords[i];
            nd++;
        } else {
            color = color * t->dims[i] + coords[i];
        }
    }
    mpi_topo_t *s = calloc(1, sizeof(*s));
    if (!s) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
    s->kind = MPI_CART;
    s->ndims = nd;
    if (nd > 0) {
        s->dims = malloc(sizeof(int) * (size_t)nd);
        s->periods = malloc(sizeof(int) * (size_t)nd);
        if (!s->dims || !s->periods) {
            mpi_topo_free(s);
            return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
        }
        for (int i = 0, k = 0; i < t->ndims; i++)
            if (remain_dims[i]) {
                s->dims[k] = t->dims[i];
                s->periods[k++] = t->periods[i];
            }
    }
    weft_comm_t wc;
    if ((rc = weft_comm_split(c->wc, color, key, WEFT_OPTIONS_NULL, &wc))) {
        mpi_topo_free(s);
        return mpi_err_weft(c, rc, fn);
    }
    if ((rc = mpi_comm_wrap(c, wc, newcomm, fn))) {
        mpi_topo_free(s);
        return rc;
    }
    ((struct MPI_ABI_Comm *)*newcomm)->topo = s;
    return MPI_SUCCESS;
}

MPI_DEF(int, Cart_map, (MPI_Comm comm, int ndims, const int dims[], const int periods[], int *newrank))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Cart_map", &c);
    if (rc) return rc;
    (void)periods;
    if (ndims < 0 || (ndims > 0 && !dims) || !newrank)
        return mpi_err(c, MPI_ERR_ARG, "MPI_Cart_map", "invalid argument");
    long long n = 1;
    for (int i = 0; i < ndims; i++) {
        if (dims[i] <= 0) return mpi_err(c, MPI_ERR_DIMS, "MPI_Cart_map", "dims[%d] = %d", i, dims[i]);
        n *= dims[i];
    }
    if (n > c->size) return mpi_err(c, MPI_ERR_DIMS, "MPI_Cart_map", "grid larger than the communicator");
    *newrank = c->rank < n ? c->rank : MPI_UNDEFINED;
    return MPI_SUCCESS;
}

MPI_DEF(int, Dims_create, (int nnodes, int ndims, int dims[]))
{
    const char *fn = "MPI_Dims_create";
    if (nnodes <= 0) return mpi_err(NULL, MPI_ERR_ARG, fn, "nnodes %d is not positive", nnodes);
    if (ndims < 0 || (ndims > 0 && !dims)) return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid ndims or dims");
    int fixed = 1, free_dims = 0;
    for (int i = 0; i < ndims; i++) {
        if (dims[i] < 0) return mpi_err(NULL, MPI_ERR_DIMS, fn, "dims[%d] = %d is negative", i, dims[i]);
        if (dims[i] > 0)
            fixed *= dims[i];
        else
            free_dims++;
    }
    if (nnodes % fixed) return mpi_err(NULL, MPI_ERR_DIMS, fn, "%d nodes do not divide into the dims given", nnodes);
    int rest = nnodes / fixed;
    if (free_dims == 0) {
        if (rest != 1) return mpi_err(NULL, MPI_ERR_DIMS, fn, "the dims given do not multiply to %d", nnodes);
        return MPI_SUCCESS;
    }
    /* the prime factors, largest first, each to the smallest free dim */
    int f[64], nf = 0, k[64];
    for (int p = 2; (long long)p * p <= rest; p++)
        while (rest % p == 0 && nf < 64) {
            f[nf++] = p;
            rest /= p;
        }
    if (rest > 1) f[nf++] = rest;
    for (int i = 0; i < free_dims; i++)
        k[i] = 1;
    for (int i = nf - 1; i >= 0; i--) {
        int m = 0;
        for (int j = 1; j < free_dims; j++)
            if (k[j] < k[m]) m = j;
        k[m] *= f[i];
    }
    /* non-increasing order */
    for (int i = 0; i < free_dims; i++)
        for (int j = i + 1; j < free_dims; j++)
            if (k[j] > k[i]) {
                int x = k[i];
                k[i] = k[j];
                k[j] = x;
            }
    for (int i = 0, j = 0; i < ndims; i++)
        if (dims[i] == 0) dims[i] = k[j++];
    return MPI_SUCCESS;
}

/* ---- graphs ------------------------------------------------------------------------ */

MPI_DEF(int, Graph_create,
        (MPI_Comm comm_old, int nnodes, const int index[], const int edges[], int reorder, MPI_Comm *comm_graph))
{
    const char *fn = "MPI_Graph_create";
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm_old, fn, &c);
    if (rc) return rc;
    (void)reorder;
    if (!comm_graph) return mpi_err(c, MPI_ERR_ARG, fn, "NULL comm_graph");
    *comm_graph = MPI_COMM_NULL; /* on any error */
    if (nnodes < 0 || nnodes > c->size || (nnodes > 0 && (!index || !edges)))
        return mpi_err(c, MPI_ERR_ARG, fn, "invalid nnodes %d (communicator of %d), or NULL index or edges", nnodes,
                       c->size);
    /* index[i] is where node i's edges end in edges[]: the neighbour
     * queries read edges[] from index[i - 1] to index[i] */
    for (int i = 0, prev = 0; i < nnodes; prev = index[i++])
        if (index[i] < prev)
            return mpi_err(c, MPI_ERR_ARG, fn, "index[%d] = %d is below %d (edge counts: not negative, not decreasing)",
                           i, index[i], prev);
    int nedges = nnodes > 0 ? index[nnodes - 1] : 0;
    for (int i = 0; i < nedges; i++)
        if (edges[i] < 0 || edges[i] >= nnodes)
            return mpi_err(c, MPI_ERR_ARG, fn, "edge %d = %d out of range", i, edges[i]);
    mpi_topo_t *t = calloc(1, sizeof(*t));
    if (!t) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
    t->kind = MPI_GRAPH;
    t->nnodes = nnodes;
    t->nedges = nedges;
    t->index = dup_ints(index, nnodes);
    t->edges = dup_ints(edges, nedges);
    return topo_split(c, nnodes, t, comm_graph, fn);
}

MPI_DEF(int, Graphdims_get, (MPI_Comm comm, int *nnodes, int *nedges))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_GRAPH, "MPI_Graphdims_get", &c);
    if (rc) return rc;
    if (!nnodes || !nedges) return mpi_err(c, MPI_ERR_ARG, "MPI_Graphdims_get", "NULL output");
    *nnodes = c->topo->nnodes;
    *nedges = c->topo->nedges;
    return MPI_SUCCESS;
}

MPI_DEF(int, Graph_get, (MPI_Comm comm, int maxindex, int maxedges, int index[], int edges[]))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_GRAPH, "MPI_Graph_get", &c);
    if (rc) return rc;
    mpi_topo_t *t = c->topo;
    if (maxindex < 0 || maxedges < 0 || (maxindex > 0 && !index) || (maxedges > 0 && !edges))
        return mpi_err(c, MPI_ERR_ARG, "MPI_Graph_get", "invalid arrays");
    for (int i = 0; i < t->nnodes && i < maxindex; i++)
        index[i] = t->index[i];
    for (int i = 0; i < t->nedges && i < maxedges; i++)
        edges[i] = t->edges[i];
    return MPI_SUCCESS;
}

static int graph_neighbors(const mpi_topo_t *t, int rank, int *first)
{
    *first = rank == 0 ? 0 : t->index[rank - 1];
    return t->index[rank] - *first;
}

MPI_DEF(int, Graph_neighbors_count, (MPI_Comm comm, int rank, int *nneighbors))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_GRAPH, "MPI_Graph_neighbors_count", &c);
    if (rc) return rc;
    if (rank < 0 || rank >= c->topo->nnodes)
        return mpi_err(c, MPI_ERR_RANK, "MPI_Graph_neighbors_count", "rank %d out of range", rank);
    if (!nneighbors) return mpi_err(c, MPI_ERR_ARG, "MPI_Graph_neighbors_count", "NULL output");
    int first;
    *nneighbors = graph_neighbors(c->topo, rank, &first);
    return MPI_SUCCESS;
}

MPI_DEF(int, Graph_neighbors, (MPI_Comm comm, int rank, int maxneighbors, int neighbors[]))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_GRAPH, "MPI_Graph_neighbors", &c);
    if (rc) return rc;
    if (rank < 0 || rank >= c->topo->nnodes)
        return mpi_err(c, MPI_ERR_RANK, "MPI_Graph_neighbors", "rank %d out of range", rank);
    int first, n = graph_neighbors(c->topo, rank, &first);
    if (maxneighbors > 0 && !neighbors) return mpi_err(c, MPI_ERR_ARG, "MPI_Graph_neighbors", "NULL output");
    for (int i = 0; i < n && i < maxneighbors; i++)
        neighbors[i] = c->topo->edges[first + i];
    return MPI_SUCCESS;
}

MPI_DEF(int, Graph_map, (MPI_Comm comm, int nnodes, const int index[], const int edges[], int *newrank))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Graph_map", &c);
    if (rc) return rc;
    (void)index, (void)edges;
    if (nnodes < 0 || nnodes > c->size || !newrank) return mpi_err(c, MPI_ERR_ARG, "MPI_Graph_map", "invalid argument");
    *newrank = c->rank < nnodes ? c->rank : MPI_UNDEFINED;
    return MPI_SUCCESS;
}

/* ---- distributed graphs ------------------------------------------------------------ */

static int dist_graph_wrap(struct MPI_ABI_Comm *c, int indegree, const int sources[], const int *sw, int outdegree,
                           const int dests[], const int *dw, MPI_Comm *out, const char *fn)
{
    mpi_topo_t *t = calloc(1, sizeof(*t));
    if (!t) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
    t->kind = MPI_DIST_GRAPH;
    t->indegree = indegree;
    t->outdegree = outdegree;
    t->weighted = sw != MPI_UNWEIGHTED && dw != MPI_UNWEIGHTED;
    t->sources = dup_ints(sources, indegree);
    t->dests = dup_ints(dests, outdegree);
    if (t->weighted) {
        t->sourceweights = sw == MPI_WEIGHTS_EMPTY ? NULL : dup_ints(sw, indegree);
        t->destweights = dw == MPI_WEIGHTS_EMPTY ? NULL : dup_ints(dw, outdegree);
    }
    weft_comm_t wc;
    int rc = weft_comm_dup(c->wc, WEFT_OPTIONS_NULL, &wc);
    if (rc) {
        mpi_topo_free(t);
        return mpi_err_weft(c, rc, fn);
    }
    if ((rc = mpi_comm_wrap(c, wc, out, fn))) {
        mpi_topo_free(t);
        return rc;
    }
    ((struct MPI_ABI_Comm *)*out)->topo = t;
    return MPI_SUCCESS;
}

MPI_DEF(int, Dist_graph_create_adjacent,
        (MPI_Comm comm_old, int indegree, const int sources[], const int *sourceweights, int outdegree,
         const int destinations[], const int *destweights, MPI_Info info, int reorder, MPI_Comm *comm_dist_graph))
{
    const char *fn = "MPI_Dist_graph_create_adjacent";
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm_old, fn, &c);
    if (rc) return rc;
    (void)info, (void)reorder;
    if (!comm_dist_graph) return mpi_err(c, MPI_ERR_ARG, fn, "NULL comm_dist_graph");
    *comm_dist_graph = MPI_COMM_NULL; /* on any error */
    if (indegree < 0 || outdegree < 0 || (indegree > 0 && !sources) || (outdegree > 0 && !destinations))
        return mpi_err(c, MPI_ERR_ARG, fn, "invalid degree, or NULL neighbour array");
    for (int i = 0; i < indegree; i++)
        if (sources[i] < 0 || sources[i] >= c->size)
            return mpi_err(c, MPI_ERR_RANK, fn, "source %d out of range", sources[i]);
    for (int i = 0; i < outdegree; i++)
        if (destinations[i] < 0 || destinations[i] >= c->size)
            return mpi_err(c, MPI_ERR_RANK, fn, "destination %d out of range", destinations[i]);
    return dist_graph_wrap(c, indegree, sources, sourceweights, outdegree, destinations, destweights, comm_dist_graph,
                           fn);
}

/* The general form: every rank names some edges; each rank learns its in
 * and out neighbours through one allgather of all edges. */
MPI_DEF(int, Dist_graph_create,
        (MPI_Comm comm_old, int n, const int sources[], const int degrees[], const int destinations[],
         const int *weights, MPI_Info info, int reorder, MPI_Comm *comm_dist_graph))
{
    const char *fn = "MPI_Dist_graph_create";
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm_old, fn, &c);
    if (rc) return rc;
    (void)info, (void)reorder;
    if (!comm_dist_graph) return mpi_err(c, MPI_ERR_ARG, fn, "NULL comm_dist_graph");
    *comm_dist_graph = MPI_COMM_NULL; /* on any error */
    if (n < 0 || (n > 0 && (!sources || !degrees)))
        return mpi_err(c, MPI_ERR_ARG, fn, "invalid n, or NULL sources or degrees");
    int weighted = weights != MPI_UNWEIGHTED;
    int64_t mine = 0;
    for (int i = 0; i < n; i++) {
        if (degrees[i] < 0) return mpi_err(c, MPI_ERR_ARG, fn, "negative degree");
        mine += degrees[i];
    }
    /* my edges as (src, dst, weight) triples */
    int *e = malloc(sizeof(int) * 3 * (size_t)(mine + 1));
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)c->size), *displs = malloc(sizeof(int64_t) * (size_t)c->size);
    if (!e || !counts || !displs) {
        free(e), free(counts), free(displs);
        return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    for (int i = 0, k = 0; i < n; i++)
        for (int j = 0; j < degrees[i]; j++, k++) {
            e[3 * k] = sources[i];
            e[3 * k + 1] = destinations[k];
            e[3 * k + 2] = weighted && weights != MPI_WEIGHTS_EMPTY ? weights[k] : 1;
        }
    int64_t mine3 = 3 * mine;
    if ((rc = weft_allgather(&mine3, counts, 1, WEFT_INT64, c->wc))) {
        free(e), free(counts), free(displs);
        return mpi_err_weft(c, rc, fn);
    }
    int64_t total = 0;
    for (int i = 0; i < c->size; i++) {
        displs[i] = total;
        total += counts[i];
    }
    int *all = malloc(sizeof(int) * (size_t)(total + 1));
    if (!all) {
        free(e), free(counts), free(displs);
        return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    rc = weft_allgatherv(e, mine3, all, counts, displs, WEFT_INT32, c->wc);
    free(e), free(counts), free(displs);
    if (rc) {
        free(all);
        return mpi_err_weft(c, rc, fn);
    }
    int nin = 0, nout = 0;
    for (int64_t k = 0; k < total; k += 3) {
        if (all[k + 1] == c->rank) nin++;
        if (all[k] == c->rank) nout++;
    }
    int *in = malloc(sizeof(int) * (size_t)(nin + 1)), *inw = malloc(sizeof(int) * (size_t)(nin + 1));
    int *out = malloc(sizeof(int) * (size_t)(nout + 1)), *outw = malloc(sizeof(int) * (size_t)(nout + 1));
    if (!in || !inw || !out || !outw) {
        free(all), free(in), free(inw), free(out), free(outw);
        return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    nin = nout = 0;
    for (int64_t k = 0; k < total; k += 3) {
        if (all[k + 1] == c->rank) {
            in[nin] = all[k];
            inw[nin++] = all[k + 2];
        }
        if (all[k] == c->rank) {
            out[nout] = all[k + 1];
            outw[nout++] = all[k + 2];
        }
    }
    free(all);
    rc = dist_graph_wrap(c, nin, in, weighted ? inw : MPI_UNWEIGHTED, nout, out, weighted ? outw : MPI_UNWEIGHTED,
                         comm_dist_graph, fn);
    free(in), free(inw), free(out), free(outw);
    return rc;
}

MPI_DEF(int, Dist_graph_neighbors_count, (MPI_Comm comm, int *indegree, int *outdegree, int *weighted))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_DIST_GRAPH, "MPI_Dist_graph_neighbors_count", &c);
    if (rc) return rc;
    if (!indegree || !outdegree || !weighted)
        return mpi_err(c, MPI_ERR_ARG, "MPI_Dist_graph_neighbors_count", "NULL output");
    *indegree = c->topo->indegree;
    *outdegree = c->topo->outdegree;
    *weighted = c->topo->weighted;
    return MPI_SUCCESS;
}

MPI_DEF(int, Dist_graph_neighbors,
        (MPI_Comm comm, int maxindegree, int sources[], int *sourceweights, int maxoutdegree, int destinations[],
         int *destweights))
{
    struct MPI_ABI_Comm *c;
    int rc = check_topo(comm, MPI_DIST_GRAPH, "MPI_Dist_graph_neighbors", &c);
    if (rc) return rc;
    mpi_topo_t *t = c->topo;
    for (int i = 0; i < t->indegree && i < maxindegree; i++) {
        sources[i] = t->sources[i];
        if (t->weighted && sourceweights && sourceweights != MPI_UNWEIGHTED && t->sourceweights)
            sourceweights[i] = t->sourceweights[i];
    }
    for (int i = 0; i < t->outdegree && i < maxoutdegree; i++) {
        destinations[i] = t->dests[i];
        if (t->weighted && destweights && destweights != MPI_UNWEIGHTED && t->destweights)
            destweights[i] = t->destweights[i];
    }
    return MPI_SUCCESS;
}
