/* Communicators: a weft communicator plus what MPI hangs on it (error
 * handler, attributes, name, info, topology). Creation is weft's
 * (dup, split); the MPI forms that name a group become splits. */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mpi_check_comm(MPI_Comm h, const char *fn, struct MPI_ABI_Comm **out)
{
    struct MPI_ABI_Comm *c = mpi_comm_get(h);
    if (MPI_LIKELY(c != NULL)) {
        *out = c;
        return MPI_SUCCESS;
    }
    if (mpi_state != 1) MPI_CHECK_INIT(fn);
    if (h == MPI_COMM_NULL) return mpi_err(NULL, MPI_ERR_COMM, fn, "MPI_COMM_NULL is not a communicator");
    return mpi_err(NULL, MPI_ERR_COMM, fn, "invalid communicator handle %p (freed, or not a communicator)", (void *)h);
}

int mpi_comm_fill_world(struct MPI_ABI_Comm *c)
{
    weft_comm_rank(c->wc, &c->rank);
    weft_comm_size(c->wc, &c->size);
    c->world = malloc(sizeof(int) * (size_t)c->size);
    if (!c->world) return -1;
    for (int i = 0; i < c->size; i++)
        weft_comm_world_rank(c->wc, i, &c->world[i]);
    return 0;
}

static MPI_Comm comm_handle(struct MPI_ABI_Comm *c)
{
    return c->predefined ? (MPI_Comm)(uintptr_t)c->predefined : c;
}

int mpi_comm_wrap(struct MPI_ABI_Comm *parent, weft_comm_t wc, MPI_Comm *out, const char *fn)
{
    if (!wc) {
        *out = MPI_COMM_NULL;
        return MPI_SUCCESS;
    }
    struct MPI_ABI_Comm *c = mpi_obj_alloc(MPI_K_COMM);
    if (!c) {
        weft_comm_free(&wc);
        return mpi_err(parent, MPI_ERR_NO_MEM, fn, "out of communicator handles");
    }
    c->wc = wc;
    c->info = mpi_info_new();
    if (!c->info || mpi_comm_fill_world(c)) {
        mpi_comm_destroy(c);
        return mpi_err(parent, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    c->errh = parent->errh;
    mpi_errh_ref(c->errh);
    c->session_bbuf = parent->session_bbuf;
    *out = c;
    return MPI_SUCCESS;
}

void mpi_comm_destroy(struct MPI_ABI_Comm *c)
{
    if (c->bbuf) {
        mpi_bbuf_flush(c->bbuf);
        free(c->bbuf);
    }
    if (c->nbr_wc) weft_comm_free(&c->nbr_wc);
    if (c->wc) weft_comm_free(&c->wc);
    free(c->world);
    mpi_errh_unref(c->errh);
    mpi_info_unref(c->info);
    mpi_topo_free(c->topo);
    mpi_obj_release(MPI_K_COMM, c);
}

void mpi_comm_ref(struct MPI_ABI_Comm *c)
{
    if (c && !c->predefined) c->h.refs++;
}

void mpi_comm_unref(struct MPI_ABI_Comm *c)
{
    if (c && !c->predefined && --c->h.refs == 0) mpi_comm_destroy(c);
}

MPI_DEF(int, Comm_rank, (MPI_Comm comm, int *rank))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_rank", &c);
    if (MPI_UNLIKELY(rc)) return rc;
    if (MPI_UNLIKELY(!rank)) return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_rank", "NULL rank");
    *rank = c->rank;
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_size, (MPI_Comm comm, int *size))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_size", &c);
    if (MPI_UNLIKELY(rc)) return rc;
    if (MPI_UNLIKELY(!size)) return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_size", "NULL size");
    *size = c->size;
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_test_inter, (MPI_Comm comm, int *flag))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_test_inter", &c);
    if (rc) return rc;
    if (!flag) return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_test_inter", "NULL flag");
    *flag = 0;
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_remote_size, (MPI_Comm comm, int *size))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_remote_size", &c);
    if (rc) return rc;
    (void)size;
    return mpi_err(c, MPI_ERR_COMM, "MPI_Comm_remote_size", "not an intercommunicator");
}

MPI_DEF(int, Comm_remote_group, (MPI_Comm comm, MPI_Group *group))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_remote_group", &c);
    if (rc) return rc;
    (void)group;
    return mpi_err(c, MPI_ERR_COMM, "MPI_Comm_remote_group", "not an intercommunicator");
}

/* Intercommunicators are not supported: calls on one check their
 * arguments (an intracommunicator is not one) and say so. */
MPI_DEF(int, Intercomm_merge, (MPI_Comm intercomm, int high, MPI_Comm *newintracomm))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(intercomm, "MPI_Intercomm_merge", &c);
    if (rc) return rc;
    (void)high, (void)newintracomm;
    return mpi_err(c, MPI_ERR_COMM, "MPI_Intercomm_merge", "not an intercommunicator");
}

MPI_DEF(int, Intercomm_create,
        (MPI_Comm local_comm, int local_leader, MPI_Comm peer_comm, int remote_leader, int tag, MPI_Comm *newintercomm))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(local_comm, "MPI_Intercomm_create", &c);
    if (rc) return rc;
    (void)local_leader, (void)peer_comm, (void)remote_leader, (void)tag, (void)newintercomm;
    return mpi_err(c, MPI_ERR_UNSUPPORTED_OPERATION, "MPI_Intercomm_create", "intercommunicators are not supported");
}

/* What a new communicator takes from its parent: attributes (through their
 * copy callbacks), topology, and the info given. */
static int inherit(struct MPI_ABI_Comm *parent, MPI_Comm *out, int copy_attrs, struct MPI_ABI_Info *info,
                   const char *fn)
{
    struct MPI_ABI_Comm *c = (struct MPI_ABI_Comm *)*out;
    if (*out == MPI_COMM_NULL) return MPI_SUCCESS;
    if (parent->topo && !(c->topo = mpi_topo_dup(parent->topo))) goto nomem;
    if (info) {
        struct MPI_ABI_Info *d = mpi_info_dup(info);
        if (!d) goto nomem;
        mpi_info_unref(c->info);
        c->info = d;
    }
    if (copy_attrs) {
        int err = MPI_SUCCESS;
        mpi_attr_copy_all(MPI_K_COMM, comm_handle(parent), parent->attrs, c, &c->attrs, &err);
        if (err) {
            mpi_attr_delete_all(MPI_K_COMM, c, &c->attrs);
            mpi_comm_destroy(c);
            *out = MPI_COMM_NULL;
            return mpi_err(parent, err, fn, "an attribute copy callback failed (%d)", err);
        }
    }
    return MPI_SUCCESS;
nomem:
    mpi_comm_destroy(c);
    *out = MPI_COMM_NULL;
    return mpi_err(parent, MPI_ERR_NO_MEM, fn, "out of memory");
}

static int dup_common(MPI_Comm comm, struct MPI_ABI_Info *info, MPI_Comm *newcomm, const char *fn)
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, fn, &c);
    if (rc) return rc;
    if (!newcomm) return mpi_err(c, MPI_ERR_ARG, fn, "NULL newcomm");
    *newcomm = MPI_COMM_NULL; /* on any error */
    weft_comm_t wc;
    if ((rc = weft_comm_dup(c->wc, WEFT_OPTIONS_NULL, &wc))) return mpi_err_weft(c, rc, fn);
    if ((rc = mpi_comm_wrap(c, wc, newcomm, fn))) return rc;
    return inherit(c, newcomm, 1, info ? info : c->info, fn);
}

MPI_DEF(int, Comm_dup, (MPI_Comm comm, MPI_Comm *newcomm))
{
    return dup_common(comm, NULL, newcomm, "MPI_Comm_dup");
}

MPI_DEF(int, Comm_dup_with_info, (MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm))
{
    struct MPI_ABI_Info *i;
    int rc = mpi_check_info(mpi_comm_get(comm), info, "MPI_Comm_dup_with_info", &i);
    if (rc) return rc;
    if (!i) i = mpi_info_new();
    rc = dup_common(comm, i, newcomm, "MPI_Comm_dup_with_info");
    if (info == MPI_INFO_NULL) mpi_info_unref(i);
    return rc;
}

/* Nonblocking dup: the dup is done at once (a weft collective), and the
 * request is complete. */
static int idup(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm, MPI_Request *request, const char *fn)
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, fn, &c);
    if (rc) return rc;
    if (!request) return mpi_err(c, MPI_ERR_ARG, fn, "NULL request");
    rc = info == MPI_INFO_NULL ? PMPI_Comm_dup(comm, newcomm) : PMPI_Comm_dup_with_info(comm, info, newcomm);
    if (rc) return rc;
    mpi_req_t *r = NULL;
    if ((rc = mpi_req_new(MPI_REQ_DONE, c, fn, &r))) return rc;
    mpi_req_done(r, MPI_SUCCESS, MPI_ANY_SOURCE, MPI_ANY_TAG, 0);
    *request = r;
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_idup, (MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request))
{
    return idup(comm, MPI_INFO_NULL, newcomm, request, "MPI_Comm_idup");
}

MPI_DEF(int, Comm_idup_with_info, (MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm, MPI_Request *request))
{
    return idup(comm, info, newcomm, request, "MPI_Comm_idup_with_info");
}

MPI_DEF(int, Comm_split, (MPI_Comm comm, int color, int key, MPI_Comm *newcomm))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_split", &c);
    if (rc) return rc;
    if (!newcomm) return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_split", "NULL newcomm");
    *newcomm = MPI_COMM_NULL; /* on any error */
    if (color < 0 && color != MPI_UNDEFINED)
        return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_split", "color %d is negative (and not MPI_UNDEFINED)", color);
    weft_comm_t wc;
    if ((rc = weft_comm_split(c->wc, color, key, WEFT_OPTIONS_NULL, &wc))) return mpi_err_weft(c, rc, "MPI_Comm_split");
    if ((rc = mpi_comm_wrap(c, wc, newcomm, "MPI_Comm_split"))) return rc;
    return MPI_SUCCESS;
}

/* The hardware resource an info asks to split by: weft knows shared
 * memory (the node), and nothing finer is offered. */
static int wants_shared(struct MPI_ABI_Info *info)
{
    for (int i = 0; info && i < info->n; i++)
        if (!strcmp(info->keys[i], "mpi_hw_resource_type")) return !strcmp(info->vals[i], "mpi_shared_memory");
    return 0;
}

MPI_DEF(int, Comm_split_type, (MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm))
{
    struct MPI_ABI_Comm *c;
    const char *fn = "MPI_Comm_split_type";
    int rc = mpi_check_comm(comm, fn, &c);
    if (rc) return rc;
    if (!newcomm) return mpi_err(c, MPI_ERR_ARG, fn, "NULL newcomm");
    *newcomm = MPI_COMM_NULL; /* on any error */
    struct MPI_ABI_Info *i;
    if ((rc = mpi_check_info(c, info, fn, &i))) return rc;
    int node = 0, nnodes = 1, color = MPI_UNDEFINED;
    weft_node_info(&node, &nnodes);
    switch (split_type) {
    case MPI_UNDEFINED: break;
    case MPI_COMM_TYPE_SHARED: color = node; break;
    case MPI_COMM_TYPE_HW_GUIDED:
    case MPI_COMM_TYPE_RESOURCE_GUIDED: color = wants_shared(i) ? node : MPI_UNDEFINED; break;
    case MPI_COMM_TYPE_HW_UNGUIDED: break; /* nothing finer than the node to offer */
    default: return mpi_err(c, MPI_ERR_ARG, fn, "unknown split type %d", split_type);
    }
    weft_comm_t wc;
    if ((rc = weft_comm_split(c->wc, color, key, WEFT_OPTIONS_NULL, &wc))) return mpi_err_weft(c, rc, fn);
    return mpi_comm_wrap(c, wc, newcomm, fn);
}

MPI_DEF(int, Comm_create, (MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm))
{
    struct MPI_ABI_Comm *c;
    const char *fn = "MPI_Comm_create";
    int rc = mpi_check_comm(comm, fn, &c);
    if (rc) return rc;
    if (!newcomm) return mpi_err(c, MPI_ERR_ARG, fn, "NULL newcomm");
    *newcomm = MPI_COMM_NULL; /* on any error */
    struct MPI_ABI_Group *g = mpi_group_get(group);
    if (!g) return mpi_err(c, MPI_ERR_GROUP, fn, "invalid group");
    /* every member of the group must be in comm */
    for (int i = 0; i < g->size; i++) {
        int found = 0;
        for (int j = 0; j < c->size && !found; j++)
            found = c->world[j] == g->world[i];
        if (!found) return mpi_err(c, MPI_ERR_GROUP, fn, "group member %d is not in the communicator", i);
    }
    weft_comm_t wc;
    int in = g->rank != MPI_UNDEFINED;
    if ((rc = weft_comm_split(c->wc, in ? 0 : MPI_UNDEFINED, in ? g->rank : 0, WEFT_OPTIONS_NULL, &wc)))
        return mpi_err_weft(c, rc, fn);
    return mpi_comm_wrap(c, wc, newcomm, fn);
}

/* Collective over the group only: weft creates communicators collectively
 * over a parent, so only the whole parent works here. */
MPI_DEF(int, Comm_create_group, (MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm))
{
    struct MPI_ABI_Comm *c;
    const char *fn = "MPI_Comm_create_group";
    int rc = mpi_check_comm(comm, fn, &c);
    if (rc) return rc;
    (void)tag;
    if (!newcomm) return mpi_err(c, MPI_ERR_ARG, fn, "NULL newcomm");
    *newcomm = MPI_COMM_NULL; /* on any error */
    struct MPI_ABI_Group *g = mpi_group_get(group);
    if (!g) return mpi_err(c, MPI_ERR_GROUP, fn, "invalid group");
    if (g->rank == MPI_UNDEFINED) {
        *newcomm = MPI_COMM_NULL;
        return MPI_SUCCESS;
    }
    if (g->size != c->size)
        return mpi_err(c, MPI_ERR_UNSUPPORTED_OPERATION, fn,
                       "only a group of the whole communicator is supported (weft creates communicators "
                       "collectively over the parent)");
    weft_comm_t wc;
    if ((rc = weft_comm_split(c->wc, 0, g->rank, WEFT_OPTIONS_NULL, &wc))) return mpi_err_weft(c, rc, fn);
    return mpi_comm_wrap(c, wc, newcomm, fn);
}

/* The program's handle goes: the attribute delete callbacks run, the
 * handle is invalid from now on and set to MPI_COMM_NULL, and the
 * communicator is freed when nothing else holds it. */
static int free_handle(struct MPI_ABI_Comm *c, MPI_Comm *comm, const char *fn)
{
    int rc;
    if ((rc = mpi_attr_delete_all(MPI_K_COMM, c, &c->attrs)))
        return mpi_err(c, rc, fn, "an attribute delete callback failed");
    mpi_obj_retire(c);
    *comm = MPI_COMM_NULL;
    mpi_comm_unref(c);
    return MPI_SUCCESS;
}

static int check_freeable(MPI_Comm *comm, const char *fn, struct MPI_ABI_Comm **c)
{
    if (!comm) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL handle pointer");
    int rc = mpi_check_comm(*comm, fn, c);
    if (rc) return rc;
    if ((*c)->predefined) return mpi_err(*c, MPI_ERR_COMM, fn, "%s cannot be freed", (*c)->name);
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_free, (MPI_Comm * comm))
{
    const char *fn = "MPI_Comm_free";
    struct MPI_ABI_Comm *c;
    int rc = check_freeable(comm, fn, &c);
    if (rc) return rc;
    /* MPI only marks it for deallocation: operations pending on it, its
     * persistent requests and matched messages still complete normally
     * (and raise errors through its handler). */
    return free_handle(c, comm, fn);
}

/* MPI_Comm_free after everything in flight on the communicator has ended:
 * the program's pending requests (which stay its handles, complete, for
 * their Wait), the ones it freed in flight and its buffered sends, driven
 * here within the communicator's timeout (WEFT_TIMEOUT), one deadline for
 * them all. One that does not end in time (a peer that never matches), or
 * a freed one that fails, fails the call through the error handler: the
 * handle stays valid, and what has not ended stays in flight. Collective
 * only in that the peers' matching operations must be under way: there is
 * no synchronisation beyond them. */
MPI_DEF(int, Comm_disconnect, (MPI_Comm * comm))
{
    const char *fn = "MPI_Comm_disconnect";
    struct MPI_ABI_Comm *c;
    int rc = check_freeable(comm, fn, &c);
    if (rc) return rc;
    if (c->inflight) {
        double timeout = 0, deadline = 0;
        weft_comm_get_timeout(c->wc, &timeout);
        if (timeout > 0) deadline = weft_wtime() + timeout;
        if ((rc = mpi_comm_drain(c, deadline, fn))) return rc;
    }
    return free_handle(c, comm, fn);
}

MPI_DEF(int, Comm_compare, (MPI_Comm comm1, MPI_Comm comm2, int *result))
{
    struct MPI_ABI_Comm *a, *b;
    int rc = mpi_check_comm(comm1, "MPI_Comm_compare", &a);
    if (rc || (rc = mpi_check_comm(comm2, "MPI_Comm_compare", &b))) return rc;
    if (!result) return mpi_err(a, MPI_ERR_ARG, "MPI_Comm_compare", "NULL result");
    if (a == b) {
        *result = MPI_IDENT;
        return MPI_SUCCESS;
    }
    if (a->size != b->size) {
        *result = MPI_UNEQUAL;
        return MPI_SUCCESS;
    }
    int same_order = !memcmp(a->world, b->world, sizeof(int) * (size_t)a->size);
    if (same_order) {
        *result = MPI_CONGRUENT;
        return MPI_SUCCESS;
    }
    for (int i = 0; i < a->size; i++) {
        int found = 0;
        for (int j = 0; j < b->size && !found; j++)
            found = a->world[i] == b->world[j];
        if (!found) {
            *result = MPI_UNEQUAL;
            return MPI_SUCCESS;
        }
    }
    *result = MPI_SIMILAR;
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_set_name, (MPI_Comm comm, const char *comm_name))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_set_name", &c);
    if (rc) return rc;
    if (!comm_name) return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_set_name", "NULL name");
    snprintf(c->name, sizeof(c->name), "%s", comm_name);
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_get_name, (MPI_Comm comm, char *comm_name, int *resultlen))
{
    struct MPI_ABI_Comm *c;
    if (comm == MPI_COMM_NULL && comm_name && resultlen) { /* as MPICH: the null handle has its name */
        *resultlen = snprintf(comm_name, MPI_MAX_OBJECT_NAME, "MPI_COMM_NULL");
        return MPI_SUCCESS;
    }
    int rc = mpi_check_comm(comm, "MPI_Comm_get_name", &c);
    if (rc) return rc;
    if (!comm_name || !resultlen) return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_get_name", "NULL output");
    snprintf(comm_name, MPI_MAX_OBJECT_NAME, "%s", c->name);
    *resultlen = (int)strlen(comm_name);
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_set_info, (MPI_Comm comm, MPI_Info info))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_set_info", &c);
    if (rc) return rc;
    struct MPI_ABI_Info *i = mpi_info_get(info);
    if (!i) return mpi_err(c, MPI_ERR_INFO, "MPI_Comm_set_info", "invalid info");
    struct MPI_ABI_Info *d = mpi_info_dup(i);
    if (!d) return mpi_err(c, MPI_ERR_NO_MEM, "MPI_Comm_set_info", "out of memory");
    mpi_info_unref(c->info);
    c->info = d;
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_get_info, (MPI_Comm comm, MPI_Info *info_used))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_get_info", &c);
    if (rc) return rc;
    if (!info_used) return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_get_info", "NULL output");
    struct MPI_ABI_Info *d = mpi_info_dup(c->info);
    if (!d) return mpi_err(c, MPI_ERR_NO_MEM, "MPI_Comm_get_info", "out of memory");
    *info_used = d;
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_get_parent, (MPI_Comm * parent))
{
    MPI_CHECK_INIT("MPI_Comm_get_parent");
    if (!parent) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Comm_get_parent", "NULL output");
    *parent = MPI_COMM_NULL; /* no dynamic processes: never spawned */
    return MPI_SUCCESS;
}

MPI_DEF(MPI_Comm, Comm_fromint, (int comm))
{
    if (comm >= 0x100 && comm <= 0x102) return (MPI_Comm)(uintptr_t)comm;
    void *o = mpi_obj_at(MPI_K_COMM, comm - MPI_HANDLE_INT_BASE);
    return o ? o : MPI_COMM_NULL;
}

MPI_DEF(int, Comm_toint, (MPI_Comm comm))
{
    uintptr_t v = (uintptr_t)comm;
    if (v < MPI_HANDLE_INT_BASE) return (int)v;
    int i = mpi_obj_index(MPI_K_COMM, comm);
    return i < 0 ? 0x100 : MPI_HANDLE_INT_BASE + i;
}
