/* Sessions (MPI 4): a session keeps the runtime up, offers two process
 * sets ("mpi://WORLD" and "mpi://SELF") and makes communicators from their
 * groups. weft creates communicators collectively over a parent, so a
 * group becomes a communicator when it is the world's or this process's
 * alone. Also MPI_Get_hw_resource_info. */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const psets[] = {"mpi://WORLD", "mpi://SELF"};

static struct MPI_ABI_Session *session_get(MPI_Session h)
{
    if ((uintptr_t)h < MPI_HANDLE_INT_BASE) return NULL;
    return mpi_obj_check(MPI_K_SESSION, h);
}

/* Raises an error of session h through handler e (the code carries the
 * message whichever handler runs). */
static int errh_raise(struct MPI_ABI_Errhandler *e, MPI_Session h, int cls, const char *fn, const char *what)
{
    if (e->predefined) {
        struct MPI_ABI_Comm fake = {.errh = e};
        return mpi_err(&fake, cls, fn, "%s", what);
    }
    struct MPI_ABI_Comm quiet = {.errh = &mpi_errh_return};
    int code = mpi_err(&quiet, cls, fn, "%s", what);
    ((MPI_Session_errhandler_function *)(void *)e->fn)(&h, &code, fn);
    return code;
}

/* Errors of a session go to its handler. */
static int session_err(struct MPI_ABI_Session *s, int cls, const char *fn, const char *what)
{
    return errh_raise(s->errh, s, cls, fn, what);
}

/* A handler for sessions: a predefined one or one made for sessions. */
static struct MPI_ABI_Errhandler *session_errh(MPI_Errhandler h)
{
    struct MPI_ABI_Errhandler *e = mpi_errh_get(h);
    return e && (e->predefined || e->kind == 's') ? e : NULL;
}

static int check_session(MPI_Session h, const char *fn, struct MPI_ABI_Session **s)
{
    *s = session_get(h);
    if (*s) return MPI_SUCCESS;
    return mpi_err(NULL, MPI_ERR_SESSION, fn, "%s", h == MPI_SESSION_NULL ? "MPI_SESSION_NULL" : "invalid session");
}

MPI_DEF(int, Session_init, (MPI_Info info, MPI_Errhandler errhandler, MPI_Session *session))
{
    const char *fn = "MPI_Session_init";
    /* errors here go to the handler given (there is no session yet); with
     * none valid, to the one for errors tied to no object */
    struct MPI_ABI_Errhandler *e = errhandler == MPI_ERRHANDLER_NULL ? &mpi_errh_return : session_errh(errhandler);
    if (!e) return mpi_err(NULL, MPI_ERR_ERRHANDLER, fn, "invalid error handler for a session");
    struct MPI_ABI_Info *i = info == MPI_INFO_NULL ? NULL : mpi_info_get(info);
    if (info != MPI_INFO_NULL && !i) return errh_raise(e, MPI_SESSION_NULL, MPI_ERR_INFO, fn, "invalid info");
    if (!session) return errh_raise(e, MPI_SESSION_NULL, MPI_ERR_ARG, fn, "NULL session");
    int rc = mpi_runtime_up(NULL, NULL, fn);
    if (rc) return rc;
    struct MPI_ABI_Session *s = mpi_obj_alloc(MPI_K_SESSION);
    if (!s) return errh_raise(e, MPI_SESSION_NULL, MPI_ERR_NO_MEM, fn, "out of handles");
    s->info = i ? mpi_info_dup(i) : mpi_info_new();
    if (!s->info) {
        mpi_obj_release(MPI_K_SESSION, s);
        return errh_raise(e, MPI_SESSION_NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    mpi_info_set(s->info, "thread_level", "MPI_THREAD_SERIALIZED");
    s->errh = e;
    mpi_errh_ref(s->errh);
    mpi_sessions++;
    *session = s;
    return MPI_SUCCESS;
}

MPI_DEF(int, Session_finalize, (MPI_Session * session))
{
    const char *fn = "MPI_Session_finalize";
    struct MPI_ABI_Session *s;
    if (!session) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL session");
    int rc = check_session(*session, fn, &s);
    if (rc) return rc;
    mpi_bbuf_flush(&s->bbuf);
    mpi_errh_unref(s->errh);
    mpi_info_unref(s->info);
    mpi_obj_release(MPI_K_SESSION, s);
    mpi_sessions--;
    *session = MPI_SESSION_NULL;
    return mpi_runtime_down_if_unused(fn);
}

MPI_DEF(int, Session_get_info, (MPI_Session session, MPI_Info *info_used))
{
    struct MPI_ABI_Session *s;
    int rc = check_session(session, "MPI_Session_get_info", &s);
    if (rc) return rc;
    if (!info_used) return session_err(s, MPI_ERR_ARG, "MPI_Session_get_info", "NULL output");
    if (!(*info_used = mpi_info_dup(s->info)))
        return session_err(s, MPI_ERR_NO_MEM, "MPI_Session_get_info", "out of memory");
    return MPI_SUCCESS;
}

MPI_DEF(int, Session_get_num_psets, (MPI_Session session, MPI_Info info, int *npset_names))
{
    struct MPI_ABI_Session *s;
    (void)info;
    int rc = check_session(session, "MPI_Session_get_num_psets", &s);
    if (rc) return rc;
    if (!npset_names) return session_err(s, MPI_ERR_ARG, "MPI_Session_get_num_psets", "NULL output");
    *npset_names = 2;
    return MPI_SUCCESS;
}

MPI_DEF(int, Session_get_nth_pset, (MPI_Session session, MPI_Info info, int n, int *pset_len, char *pset_name))
{
    const char *fn = "MPI_Session_get_nth_pset";
    struct MPI_ABI_Session *s;
    (void)info;
    int rc = check_session(session, fn, &s);
    if (rc) return rc;
    if (n < 0 || n > 1) return session_err(s, MPI_ERR_ARG, fn, "no such process set");
    if (!pset_len) return session_err(s, MPI_ERR_ARG, fn, "NULL pset_len");
    int need = (int)strlen(psets[n]) + 1;
    if (*pset_len > 0) {
        if (!pset_name) return session_err(s, MPI_ERR_ARG, fn, "NULL pset_name");
        snprintf(pset_name, (size_t)*pset_len, "%s", psets[n]);
    }
    *pset_len = need;
    return MPI_SUCCESS;
}

static int pset_index(const char *name)
{
    for (int i = 0; i < 2; i++)
        if (name && !strcmp(name, psets[i])) return i;
    return -1;
}

MPI_DEF(int, Session_get_pset_info, (MPI_Session session, const char *pset_name, MPI_Info *info))
{
    const char *fn = "MPI_Session_get_pset_info";
    struct MPI_ABI_Session *s;
    int rc = check_session(session, fn, &s);
    if (rc) return rc;
    int p = pset_index(pset_name);
    if (p < 0) return session_err(s, MPI_ERR_ARG, fn, "unknown process set");
    if (!info) return session_err(s, MPI_ERR_ARG, fn, "NULL output");
    struct MPI_ABI_Info *i = mpi_info_new();
    if (!i) return session_err(s, MPI_ERR_NO_MEM, fn, "out of memory");
    char v[32];
    snprintf(v, sizeof(v), "%d", p == 0 ? mpi_comm_world_obj.size : 1);
    mpi_info_set(i, "mpi_size", v);
    *info = i;
    return MPI_SUCCESS;
}

MPI_DEF(int, Group_from_session_pset, (MPI_Session session, const char *pset_name, MPI_Group *newgroup))
{
    const char *fn = "MPI_Group_from_session_pset";
    struct MPI_ABI_Session *s;
    int rc = check_session(session, fn, &s);
    if (rc) return rc;
    int p = pset_index(pset_name);
    if (p < 0) return session_err(s, MPI_ERR_ARG, fn, "unknown process set");
    if (!newgroup) return session_err(s, MPI_ERR_ARG, fn, "NULL output");
    return PMPI_Comm_group(p == 0 ? MPI_COMM_WORLD : MPI_COMM_SELF, newgroup);
}

MPI_DEF(int, Comm_create_from_group,
        (MPI_Group group, const char *stringtag, MPI_Info info, MPI_Errhandler errhandler, MPI_Comm *newcomm))
{
    const char *fn = "MPI_Comm_create_from_group";
    MPI_CHECK_INIT(fn);
    struct MPI_ABI_Group *g = mpi_group_get(group);
    if (!g) return mpi_err(NULL, MPI_ERR_GROUP, fn, "invalid group");
    if (!stringtag || !newcomm) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL stringtag or output");
    *newcomm = MPI_COMM_NULL; /* on any error */
    struct MPI_ABI_Errhandler *e = mpi_errh_get(errhandler);
    if (errhandler != MPI_ERRHANDLER_NULL && (!e || (!e->predefined && e->kind != MPI_K_COMM)))
        return mpi_err(NULL, MPI_ERR_ERRHANDLER, fn, "invalid error handler for a communicator");
    if (g->rank == MPI_UNDEFINED) {
        *newcomm = MPI_COMM_NULL;
        return MPI_SUCCESS;
    }
    struct MPI_ABI_Comm *parent;
    if (g->size == 1)
        parent = &mpi_comm_self_obj;
    else if (g->size == mpi_comm_world_obj.size)
        parent = &mpi_comm_world_obj;
    else
        return mpi_err(NULL, MPI_ERR_UNSUPPORTED_OPERATION, fn,
                       "only the groups of all processes or of one are supported (weft creates communicators "
                       "collectively over a parent)");
    weft_comm_t wc;
    int rc = weft_comm_split(parent->wc, 0, g->rank, WEFT_OPTIONS_NULL, &wc);
    if (rc) return mpi_err_weft(NULL, rc, fn);
    if ((rc = mpi_comm_wrap(parent, wc, newcomm, fn))) return rc;
    struct MPI_ABI_Comm *c = (struct MPI_ABI_Comm *)*newcomm;
    struct MPI_ABI_Errhandler *ce = e ? e : &mpi_errh_fatal;
    mpi_errh_ref(ce);
    mpi_errh_unref(c->errh);
    c->errh = ce;
    struct MPI_ABI_Info *i = info == MPI_INFO_NULL ? NULL : mpi_info_get(info);
    if (i) {
        struct MPI_ABI_Info *d = mpi_info_dup(i);
        if (d) {
            mpi_info_unref(c->info);
            c->info = d;
        }
    }
    return MPI_SUCCESS;
}

MPI_DEF(int, Session_set_errhandler, (MPI_Session session, MPI_Errhandler errhandler))
{
    struct MPI_ABI_Session *s;
    int rc = check_session(session, "MPI_Session_set_errhandler", &s);
    if (rc) return rc;
    struct MPI_ABI_Errhandler *e = session_errh(errhandler);
    if (!e)
        return session_err(s, MPI_ERR_ERRHANDLER, "MPI_Session_set_errhandler", "invalid error handler for a session");
    mpi_errh_ref(e);
    mpi_errh_unref(s->errh);
    s->errh = e;
    return MPI_SUCCESS;
}

MPI_DEF(int, Session_get_errhandler, (MPI_Session session, MPI_Errhandler *errhandler))
{
    struct MPI_ABI_Session *s;
    int rc = check_session(session, "MPI_Session_get_errhandler", &s);
    if (rc) return rc;
    if (!errhandler) return session_err(s, MPI_ERR_ARG, "MPI_Session_get_errhandler", "NULL output");
    mpi_errh_ref(s->errh);
    *errhandler = s->errh->predefined ? (MPI_Errhandler)(uintptr_t)s->errh->predefined : s->errh;
    return MPI_SUCCESS;
}

MPI_DEF(int, Session_call_errhandler, (MPI_Session session, int errorcode))
{
    struct MPI_ABI_Session *s;
    int rc = check_session(session, "MPI_Session_call_errhandler", &s);
    if (rc) return rc;
    if (s->errh == &mpi_errh_return) return MPI_SUCCESS;
    if (s->errh->predefined) {
        struct MPI_ABI_Comm fake = {.errh = s->errh};
        mpi_errh_invoke(&fake, errorcode, "MPI_Session_call_errhandler");
        return MPI_SUCCESS;
    }
    MPI_Session h = s;
    ((MPI_Session_errhandler_function *)(void *)s->errh->fn)(&h, &errorcode, "MPI_Session_call_errhandler");
    return MPI_SUCCESS;
}

MPI_DEF(int, Session_attach_buffer, (MPI_Session session, void *buffer, int size))
{
    struct MPI_ABI_Session *s;
    int rc = check_session(session, "MPI_Session_attach_buffer", &s);
    return rc ? rc : mpi_bbuf_attach(NULL, &s->bbuf, buffer, size, "MPI_Session_attach_buffer");
}

MPI_DEF(int, Session_attach_buffer_c, (MPI_Session session, void *buffer, MPI_Count size))
{
    struct MPI_ABI_Session *s;
    int rc = check_session(session, "MPI_Session_attach_buffer_c", &s);
    return rc ? rc : mpi_bbuf_attach(NULL, &s->bbuf, buffer, size, "MPI_Session_attach_buffer_c");
}

MPI_DEF(int, Session_detach_buffer, (MPI_Session session, void *buffer_addr, int *size))
{
    struct MPI_ABI_Session *s;
    MPI_Count n = 0;
    int rc = check_session(session, "MPI_Session_detach_buffer", &s);
    if (!rc) rc = mpi_bbuf_detach(NULL, &s->bbuf, buffer_addr, &n, "MPI_Session_detach_buffer");
    if (!rc && size) mpi_count_to_int(n, size);
    return rc;
}

MPI_DEF(int, Session_detach_buffer_c, (MPI_Session session, void *buffer_addr, MPI_Count *size))
{
    struct MPI_ABI_Session *s;
    int rc = check_session(session, "MPI_Session_detach_buffer_c", &s);
    return rc ? rc : mpi_bbuf_detach(NULL, &s->bbuf, buffer_addr, size, "MPI_Session_detach_buffer_c");
}

MPI_DEF(int, Session_flush_buffer, (MPI_Session session))
{
    struct MPI_ABI_Session *s;
    int rc = check_session(session, "MPI_Session_flush_buffer", &s);
    return rc ? rc : mpi_bbuf_flush(&s->bbuf);
}

MPI_DEF(int, Session_iflush_buffer, (MPI_Session session, MPI_Request *request))
{
    struct MPI_ABI_Session *s;
    int rc = check_session(session, "MPI_Session_iflush_buffer", &s);
    if (rc) return rc;
    mpi_bbuf_flush(&s->bbuf);
    return mpi_done_request(NULL, request, "MPI_Session_iflush_buffer");
}

MPI_DEF(MPI_Session, Session_fromint, (int session))
{
    void *o = mpi_obj_at(MPI_K_SESSION, session - MPI_HANDLE_INT_BASE);
    return o ? o : MPI_SESSION_NULL;
}

MPI_DEF(int, Session_toint, (MPI_Session session))
{
    int i = mpi_obj_index(MPI_K_SESSION, session);
    return i < 0 ? (int)(uintptr_t)MPI_SESSION_NULL : MPI_HANDLE_INT_BASE + i;
}

MPI_DEF(int, Get_hw_resource_info, (MPI_Info * hw_info))
{
    if (!hw_info) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Get_hw_resource_info", "NULL output");
    struct MPI_ABI_Info *i = mpi_info_new();
    char topo[256] = "";
    if (!i) return mpi_err(NULL, MPI_ERR_NO_MEM, "MPI_Get_hw_resource_info", "out of memory");
    mpi_info_set(i, "mpi_hw_resource_type", "mpi_shared_memory");
    if (weft_host_topology(topo, sizeof(topo)) == WEFT_SUCCESS) mpi_info_set(i, "weft_host_topology", topo);
    *hw_info = i;
    return MPI_SUCCESS;
}
