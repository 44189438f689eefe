/* Keyvals and attributes on communicators and datatypes (windows have
 * keyvals but no windows to carry them). The predefined attributes
 * (MPI_TAG_UB, MPI_APPNUM, MPI_UNIVERSE_SIZE, ...) are answered from
 * weft's values on every communicator. */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>

struct mpi_attr {
    mpi_keyval_t *kv;
    void *val;
    struct mpi_attr *next;
};

#define KEYVAL_BASE 0x10000
extern int mpi_last_used_code;

static mpi_keyval_t *keyval_get(int id, int kind)
{
    mpi_keyval_t *k = mpi_obj_at(MPI_K_KEYVAL, id - KEYVAL_BASE);
    return k && !k->freed && k->kind == kind ? k : NULL;
}

static void keyval_unref(mpi_keyval_t *k)
{
    if (--k->h.refs == 0) mpi_obj_release(MPI_K_KEYVAL, k);
}

static int keyval_create(int kind, MPI_Comm_copy_attr_function *copy, MPI_Comm_delete_attr_function *del, int *keyval,
                         void *extra, const char *fn)
{
    if (!keyval) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL keyval");
    mpi_keyval_t *k = mpi_obj_alloc(MPI_K_KEYVAL);
    if (!k) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of keyvals");
    k->kind = kind;
    k->copy = copy;
    k->del = del;
    k->extra_state = extra;
    k->id = KEYVAL_BASE + mpi_obj_index(MPI_K_KEYVAL, k);
    *keyval = k->id;
    return MPI_SUCCESS;
}

static int keyval_free(int kind, int *keyval, const char *fn)
{
    if (!keyval) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL keyval");
    mpi_keyval_t *k = keyval_get(*keyval, kind);
    if (!k) return mpi_err(NULL, MPI_ERR_KEYVAL, fn, "invalid keyval %d", *keyval);
    k->freed = 1;
    keyval_unref(k);
    *keyval = MPI_KEYVAL_INVALID;
    return MPI_SUCCESS;
}

/* Delete callbacks receive the handle the program knows. */
static void *user_handle(int kind, void *obj)
{
    if (kind == MPI_K_COMM) {
        struct MPI_ABI_Comm *c = obj;
        return c->predefined ? (void *)(uintptr_t)c->predefined : c;
    }
    struct MPI_ABI_Datatype *t = obj;
    return t->predefined ? (void *)(uintptr_t)t->predefined : t;
}

static int attr_delete_one(int kind, void *obj, struct mpi_attr *a)
{
    int rc = MPI_SUCCESS;
    if (a->kv->del) {
        if (kind == MPI_K_COMM)
            rc = a->kv->del((MPI_Comm)user_handle(kind, obj), a->kv->id, a->val, a->kv->extra_state);
        else
            rc = ((MPI_Type_delete_attr_function *)(void *)a->kv->del)((MPI_Datatype)user_handle(kind, obj), a->kv->id,
                                                                       a->val, a->kv->extra_state);
    }
    return rc;
}

/* Deletes every attribute, newest first; stops at a failing callback. */
int mpi_attr_delete_all(int kind, void *obj, mpi_attr_t **list)
{
    while (*list) {
        struct mpi_attr *a = *list;
        int rc = attr_delete_one(kind, obj, a);
        if (rc) return rc > 0 && rc < 0x3fff ? rc : MPI_ERR_OTHER;
        *list = a->next;
        keyval_unref(a->kv);
        free(a);
    }
    return MPI_SUCCESS;
}

int mpi_attr_copy_all(int kind, void *oldobj, mpi_attr_t *from, void *newobj, mpi_attr_t **to, int *err)
{
    (void)newobj;
    mpi_attr_t **tail = to;
    *err = MPI_SUCCESS;
    /* keep the order: walk oldest to newest is not needed, copy as listed */
    for (struct mpi_attr *a = from; a; a = a->next) {
        void *out = NULL;
        int flag = 0;
        if (a->kv->copy == MPI_COMM_NULL_COPY_FN) continue;
        if (a->kv->copy == MPI_COMM_DUP_FN) {
            out = a->val;
            flag = 1;
        } else {
            int rc;
            if (kind == MPI_K_COMM)
                rc = a->kv->copy((MPI_Comm)oldobj, a->kv->id, a->kv->extra_state, a->val, &out, &flag);
            else
                rc = ((MPI_Type_copy_attr_function *)(void *)a->kv->copy)((MPI_Datatype)oldobj, a->kv->id,
                                                                          a->kv->extra_state, a->val, &out, &flag);
            if (rc) {
                *err = rc > 0 && rc < 0x3fff ? rc : MPI_ERR_OTHER;
                return *err;
            }
        }
        if (!flag) continue;
        struct mpi_attr *n = malloc(sizeof(*n));
        if (!n) {
            *err = MPI_ERR_NO_MEM;
            return *err;
        }
        n->kv = a->kv;
        n->kv->h.refs++;
        n->val = out;
        n->next = NULL;
        *tail = n;
        tail = &n->next;
    }
    return MPI_SUCCESS;
}

static int attr_set(int kind, void *obj, mpi_attr_t **list, int keyval, void *val, struct MPI_ABI_Comm *ec,
                    const char *fn)
{
    mpi_keyval_t *k = keyval_get(keyval, kind);
    if (!k) return mpi_err(ec, MPI_ERR_KEYVAL, fn, "invalid keyval %d", keyval);
    for (struct mpi_attr *a = *list; a; a = a->next)
        if (a->kv == k) {
            int rc = attr_delete_one(kind, obj, a);
            if (rc) return mpi_err(ec, rc > 0 && rc < 0x3fff ? rc : MPI_ERR_OTHER, fn, "the delete callback failed");
            a->val = val;
            return MPI_SUCCESS;
        }
    struct mpi_attr *a = malloc(sizeof(*a));
    if (!a) return mpi_err(ec, MPI_ERR_NO_MEM, fn, "out of memory");
    a->kv = k;
    k->h.refs++;
    a->val = val;
    a->next = *list;
    *list = a;
    return MPI_SUCCESS;
}

static int attr_get(int kind, mpi_attr_t *list, int keyval, void *val, int *flag, struct MPI_ABI_Comm *ec,
                    const char *fn)
{
    mpi_keyval_t *k = mpi_obj_at(MPI_K_KEYVAL, keyval - KEYVAL_BASE);
    if (!k || k->kind != kind) return mpi_err(ec, MPI_ERR_KEYVAL, fn, "invalid keyval %d", keyval);
    if (!val || !flag) return mpi_err(ec, MPI_ERR_ARG, fn, "NULL attribute_val or flag");
    *flag = 0;
    for (struct mpi_attr *a = list; a; a = a->next)
        if (a->kv == k) {
            *(void **)val = a->val;
            *flag = 1;
            break;
        }
    return MPI_SUCCESS;
}

static int attr_delete(int kind, void *obj, mpi_attr_t **list, int keyval, struct MPI_ABI_Comm *ec, const char *fn)
{
    mpi_keyval_t *k = mpi_obj_at(MPI_K_KEYVAL, keyval - KEYVAL_BASE);
    if (!k || k->kind != kind) return mpi_err(ec, MPI_ERR_KEYVAL, fn, "invalid keyval %d", keyval);
    for (struct mpi_attr **p = list; *p; p = &(*p)->next)
        if ((*p)->kv == k) {
            struct mpi_attr *a = *p;
            int rc = attr_delete_one(kind, obj, a);
            if (rc) return mpi_err(ec, rc > 0 && rc < 0x3fff ? rc : MPI_ERR_OTHER, fn, "the delete callback failed");
            *p = a->next;
            keyval_unref(a->kv);
            free(a);
            return MPI_SUCCESS;
        }
    return MPI_SUCCESS;
}

/* ---- communicators ---------------------------------------------------- */

static int tag_ub = WEFT_TAG_UB, host = MPI_PROC_NULL, io = MPI_ANY_SOURCE, wtime_global = 0, appnum = 0;
static int universe_size, last_used;

/* The predefined keys: *flag says whether this one is set. */
static int predefined_get(struct MPI_ABI_Comm *c, int keyval, void *val, int *flag)
{
    void *p = NULL;
    switch (keyval) {
    case MPI_TAG_UB: p = &tag_ub; break;
    case MPI_HOST: p = &host; break;
    case MPI_IO: p = &io; break;
    case MPI_WTIME_IS_GLOBAL: p = &wtime_global; break;
    case MPI_APPNUM: p = &appnum; break;
    case MPI_UNIVERSE_SIZE:
        universe_size = mpi_comm_world_obj.size;
        p = &universe_size;
        break;
    case MPI_LASTUSEDCODE:
        last_used = mpi_last_used_code;
        p = &last_used;
        break;
    default: return 0;
    }
    (void)c;
    *(void **)val = p;
    *flag = 1;
    return 1;
}

MPI_DEF(int, Comm_create_keyval,
        (MPI_Comm_copy_attr_function * copy, MPI_Comm_delete_attr_function *del, int *keyval, void *extra_state))
{
    return keyval_create(MPI_K_COMM, copy, del, keyval, extra_state, "MPI_Comm_create_keyval");
}

MPI_DEF(int, Keyval_create, (MPI_Copy_function * copy, MPI_Delete_function *del, int *keyval, void *extra_state))
{
    return keyval_create(MPI_K_COMM, copy, del, keyval, extra_state, "MPI_Keyval_create");
}

MPI_DEF(int, Comm_free_keyval, (int *keyval))
{
    return keyval_free(MPI_K_COMM, keyval, "MPI_Comm_free_keyval");
}

MPI_DEF(int, Keyval_free, (int *keyval))
{
    return keyval_free(MPI_K_COMM, keyval, "MPI_Keyval_free");
}

MPI_DEF(int, Comm_set_attr, (MPI_Comm comm, int keyval, void *attribute_val))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_set_attr", &c);
    if (rc) return rc;
    if (keyval >= MPI_TAG_UB && keyval <= MPI_UNIVERSE_SIZE)
        return mpi_err(c, MPI_ERR_KEYVAL, "MPI_Comm_set_attr", "predefined attribute %d is read-only", keyval);
    return attr_set(MPI_K_COMM, c, &c->attrs, keyval, attribute_val, c, "MPI_Comm_set_attr");
}

MPI_DEF(int, Attr_put, (MPI_Comm comm, int keyval, void *attribute_val))
{
    return PMPI_Comm_set_attr(comm, keyval, attribute_val);
}

MPI_DEF(int, Comm_get_attr, (MPI_Comm comm, int keyval, void *attribute_val, int *flag))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_get_attr", &c);
    if (rc) return rc;
    if (!attribute_val || !flag) return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_get_attr", "NULL attribute_val or flag");
    if (predefined_get(c, keyval, attribute_val, flag)) return MPI_SUCCESS;
    return attr_get(MPI_K_COMM, c->attrs, keyval, attribute_val, flag, c, "MPI_Comm_get_attr");
}

MPI_DEF(int, Attr_get, (MPI_Comm comm, int keyval, void *attribute_val, int *flag))
{
    return PMPI_Comm_get_attr(comm, keyval, attribute_val, flag);
}

MPI_DEF(int, Comm_delete_attr, (MPI_Comm comm, int keyval))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_delete_attr", &c);
    if (rc) return rc;
    if (keyval >= MPI_TAG_UB && keyval <= MPI_UNIVERSE_SIZE)
        return mpi_err(c, MPI_ERR_KEYVAL, "MPI_Comm_delete_attr", "predefined attribute %d is read-only", keyval);
    return attr_delete(MPI_K_COMM, c, &c->attrs, keyval, c, "MPI_Comm_delete_attr");
}

MPI_DEF(int, Attr_delete, (MPI_Comm comm, int keyval))
{
    return PMPI_Comm_delete_attr(comm, keyval);
}

/* ---- datatypes -------------------------------------------------------- */

MPI_DEF(int, Type_create_keyval,
        (MPI_Type_copy_attr_function * copy, MPI_Type_delete_attr_function *del, int *keyval, void *extra_state))
{
    return keyval_create(MPI_K_DTYPE, (MPI_Comm_copy_attr_function *)(void *)copy,
                         (MPI_Comm_delete_attr_function *)(void *)del, keyval, extra_state, "MPI_Type_create_keyval");
}

MPI_DEF(int, Type_free_keyval, (int *keyval))
{
    return keyval_free(MPI_K_DTYPE, keyval, "MPI_Type_free_keyval");
}

static int check_type(MPI_Datatype h, const char *fn, struct MPI_ABI_Datatype **t)
{
    MPI_CHECK_INIT(fn);
    *t = mpi_dtype_get(h);
    if (!*t) return mpi_err(NULL, MPI_ERR_TYPE, fn, "invalid datatype");
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_set_attr, (MPI_Datatype type, int keyval, void *attribute_val))
{
    struct MPI_ABI_Datatype *t;
    int rc = check_type(type, "MPI_Type_set_attr", &t);
    if (rc) return rc;
    return attr_set(MPI_K_DTYPE, t, &t->attrs, keyval, attribute_val, NULL, "MPI_Type_set_attr");
}

MPI_DEF(int, Type_get_attr, (MPI_Datatype type, int keyval, void *attribute_val, int *flag))
{
    struct MPI_ABI_Datatype *t;
    int rc = check_type(type, "MPI_Type_get_attr", &t);
    if (rc) return rc;
    return attr_get(MPI_K_DTYPE, t->attrs, keyval, attribute_val, flag, NULL, "MPI_Type_get_attr");
}

MPI_DEF(int, Type_delete_attr, (MPI_Datatype type, int keyval))
{
    struct MPI_ABI_Datatype *t;
    int rc = check_type(type, "MPI_Type_delete_attr", &t);
    if (rc) return rc;
    return attr_delete(MPI_K_DTYPE, t, &t->attrs, keyval, NULL, "MPI_Type_delete_attr");
}

/* ---- windows: keyvals only (one-sided is not supported) ---------------- */

MPI_DEF(int, Win_create_keyval,
        (MPI_Win_copy_attr_function * copy, MPI_Win_delete_attr_function *del, int *keyval, void *extra_state))
{
    return keyval_create('w', (MPI_Comm_copy_attr_function *)(void *)copy, (MPI_Comm_delete_attr_function *)(void *)del,
                         keyval, extra_state, "MPI_Win_create_keyval");
}

MPI_DEF(int, Win_free_keyval, (int *keyval))
{
    return keyval_free('w', keyval, "MPI_Win_free_keyval");
}
