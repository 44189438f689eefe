/* Info objects: ordered key/value lists of strings. MPI_INFO_ENV holds
 * what this process was started with. */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct MPI_ABI_Info info_env = {.h = {MPI_MAGIC_BASE + MPI_K_INFO, 1}};
static int info_env_filled;

static void fill_env(void)
{
    char buf[1024];
    if (info_env_filled) return;
    info_env_filled = 1;
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0) {
        buf[n] = '\0';
        mpi_info_set(&info_env, "command", buf);
    }
    if (getcwd(buf, sizeof(buf))) mpi_info_set(&info_env, "wdir", buf);
    if (!gethostname(buf, sizeof(buf))) mpi_info_set(&info_env, "host", buf);
    const char *ws = getenv("WORLD_SIZE");
    if (mpi_state == 1) {
        snprintf(buf, sizeof(buf), "%d", mpi_comm_world_obj.size);
        ws = buf;
    }
    if (ws) mpi_info_set(&info_env, "maxprocs", ws);
    mpi_info_set(&info_env, "thread_level", "MPI_THREAD_SERIALIZED");
}

struct MPI_ABI_Info *mpi_info_get(MPI_Info h)
{
    if (h == MPI_INFO_ENV) {
        fill_env();
        return &info_env;
    }
    if ((uintptr_t)h < MPI_HANDLE_INT_BASE) return NULL;
    return mpi_obj_check(MPI_K_INFO, h);
}

int mpi_check_info(struct MPI_ABI_Comm *c, MPI_Info h, const char *fn, struct MPI_ABI_Info **out)
{
    struct MPI_ABI_Info *i = h == MPI_INFO_NULL ? NULL : mpi_info_get(h);
    if (h != MPI_INFO_NULL && !i) return mpi_err(c, MPI_ERR_INFO, fn, "invalid info");
    if (out) *out = i;
    return MPI_SUCCESS;
}

struct MPI_ABI_Info *mpi_info_new(void)
{
    return mpi_obj_alloc(MPI_K_INFO);
}

void mpi_info_unref(struct MPI_ABI_Info *info)
{
    if (!info || info == &info_env || --info->h.refs > 0) return;
    for (int i = 0; i < info->n; i++) {
        free(info->keys[i]);
        free(info->vals[i]);
    }
    free(info->keys);
    free(info->vals);
    mpi_obj_release(MPI_K_INFO, info);
}

static int find(const struct MPI_ABI_Info *info, const char *key)
{
    for (int i = 0; i < info->n; i++)
        if (!strcmp(info->keys[i], key)) return i;
    return -1;
}

int mpi_info_set(struct MPI_ABI_Info *info, const char *key, const char *val)
{
    int i = find(info, key);
    char *v = strdup(val);
    if (!v) return -1;
    if (i >= 0) {
        free(info->vals[i]);
        info->vals[i] = v;
        return 0;
    }
    if (info->n == info->cap) {
        int cap = info->cap ? 2 * info->cap : 8;
        char **k = realloc(info->keys, sizeof(char *) * (size_t)cap);
        if (k) info->keys = k;
        char **vv = realloc(info->vals, sizeof(char *) * (size_t)cap);
        if (vv) info->vals = vv;
        if (!k || !vv) {
            free(v);
            return -1;
        }
        info->cap = cap;
    }
    info->keys[info->n] = strdup(key);
    if (!info->keys[info->n]) {
        free(v);
        return -1;
    }
    info->vals[info->n++] = v;
    return 0;
}

struct MPI_ABI_Info *mpi_info_dup(const struct MPI_ABI_Info *info)
{
    struct MPI_ABI_Info *d = mpi_info_new();
    if (!d) return NULL;
    for (int i = 0; info && i < info->n; i++)
        if (mpi_info_set(d, info->keys[i], info->vals[i])) {
            mpi_info_unref(d);
            return NULL;
        }
    return d;
}

static int check_info(MPI_Info h, const char *fn, struct MPI_ABI_Info **out)
{
    *out = mpi_info_get(h);
    if (*out) return MPI_SUCCESS;
    return mpi_err(NULL, MPI_ERR_INFO, fn, "%s", h == MPI_INFO_NULL ? "MPI_INFO_NULL" : "invalid info handle");
}

static int check_key(const char *key, const char *fn)
{
    if (!key) return mpi_err(NULL, MPI_ERR_INFO_KEY, fn, "NULL key");
    size_t n = strlen(key);
    if (n == 0 || n >= MPI_MAX_INFO_KEY)
        return mpi_err(NULL, MPI_ERR_INFO_KEY, fn, "key length %zu not in 1..%d", n, MPI_MAX_INFO_KEY - 1);
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_create, (MPI_Info * info))
{
    if (!info) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Info_create", "NULL output");
    struct MPI_ABI_Info *i = mpi_info_new();
    if (!i) return mpi_err(NULL, MPI_ERR_NO_MEM, "MPI_Info_create", "out of handles");
    *info = i;
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_create_env, (int argc, char *argv[], MPI_Info *info))
{
    (void)argc, (void)argv;
    if (!info) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Info_create_env", "NULL output");
    fill_env();
    struct MPI_ABI_Info *d = mpi_info_dup(&info_env);
    if (!d) return mpi_err(NULL, MPI_ERR_NO_MEM, "MPI_Info_create_env", "out of memory");
    *info = d;
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_free, (MPI_Info * info))
{
    if (!info) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Info_free", "NULL handle pointer");
    struct MPI_ABI_Info *i;
    int rc = check_info(*info, "MPI_Info_free", &i);
    if (rc) return rc;
    if (i == &info_env) return mpi_err(NULL, MPI_ERR_INFO, "MPI_Info_free", "MPI_INFO_ENV cannot be freed");
    mpi_info_unref(i);
    *info = MPI_INFO_NULL;
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_dup, (MPI_Info info, MPI_Info *newinfo))
{
    struct MPI_ABI_Info *i;
    int rc = check_info(info, "MPI_Info_dup", &i);
    if (rc) return rc;
    if (!newinfo) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Info_dup", "NULL output");
    struct MPI_ABI_Info *d = mpi_info_dup(i);
    if (!d) return mpi_err(NULL, MPI_ERR_NO_MEM, "MPI_Info_dup", "out of memory");
    *newinfo = d;
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_set, (MPI_Info info, const char *key, const char *value))
{
    struct MPI_ABI_Info *i;
    int rc = check_info(info, "MPI_Info_set", &i);
    if (rc || (rc = check_key(key, "MPI_Info_set"))) return rc;
    if (i == &info_env) return mpi_err(NULL, MPI_ERR_INFO, "MPI_Info_set", "MPI_INFO_ENV is read-only");
    if (!value) return mpi_err(NULL, MPI_ERR_INFO_VALUE, "MPI_Info_set", "NULL value");
    if (strlen(value) >= MPI_MAX_INFO_VAL)
        return mpi_err(NULL, MPI_ERR_INFO_VALUE, "MPI_Info_set", "value longer than MPI_MAX_INFO_VAL");
    if (mpi_info_set(i, key, value)) return mpi_err(NULL, MPI_ERR_NO_MEM, "MPI_Info_set", "out of memory");
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_delete, (MPI_Info info, const char *key))
{
    struct MPI_ABI_Info *i;
    int rc = check_info(info, "MPI_Info_delete", &i);
    if (rc || (rc = check_key(key, "MPI_Info_delete"))) return rc;
    if (i == &info_env) return mpi_err(NULL, MPI_ERR_INFO, "MPI_Info_delete", "MPI_INFO_ENV is read-only");
    int k = find(i, key);
    if (k < 0) return mpi_err(NULL, MPI_ERR_INFO_NOKEY, "MPI_Info_delete", "no key \"%s\"", key);
    free(i->keys[k]);
    free(i->vals[k]);
    memmove(&i->keys[k], &i->keys[k + 1], sizeof(char *) * (size_t)(i->n - k - 1));
    memmove(&i->vals[k], &i->vals[k + 1], sizeof(char *) * (size_t)(i->n - k - 1));
    i->n--;
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_get, (MPI_Info info, const char *key, int valuelen, char *value, int *flag))
{
    struct MPI_ABI_Info *i;
    int rc = check_info(info, "MPI_Info_get", &i);
    if (rc || (rc = check_key(key, "MPI_Info_get"))) return rc;
    if (valuelen < 0 || !flag || (valuelen > 0 && !value))
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Info_get", "invalid valuelen, value or flag");
    int k = find(i, key);
    *flag = k >= 0;
    if (k >= 0) {
        size_t n = strlen(i->vals[k]);
        if (n > (size_t)valuelen) n = (size_t)valuelen;
        memcpy(value, i->vals[k], n);
        value[n] = '\0';
    }
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_get_string, (MPI_Info info, const char *key, int *buflen, char *value, int *flag))
{
    struct MPI_ABI_Info *i;
    int rc = check_info(info, "MPI_Info_get_string", &i);
    if (rc || (rc = check_key(key, "MPI_Info_get_string"))) return rc;
    if (!buflen || !flag || *buflen < 0 || (*buflen > 0 && !value))
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Info_get_string", "invalid buflen, value or flag");
    int k = find(i, key);
    *flag = k >= 0;
    if (k < 0) return MPI_SUCCESS;
    int n = (int)strlen(i->vals[k]);
    if (*buflen > 0) {
        int m = n < *buflen - 1 ? n : *buflen - 1;
        memcpy(value, i->vals[k], (size_t)m);
        value[m] = '\0';
    }
    *buflen = n + 1;
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_get_valuelen, (MPI_Info info, const char *key, int *valuelen, int *flag))
{
    struct MPI_ABI_Info *i;
    int rc = check_info(info, "MPI_Info_get_valuelen", &i);
    if (rc || (rc = check_key(key, "MPI_Info_get_valuelen"))) return rc;
    if (!valuelen || !flag) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Info_get_valuelen", "NULL output");
    int k = find(i, key);
    *flag = k >= 0;
    if (k >= 0) *valuelen = (int)strlen(i->vals[k]);
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_get_nkeys, (MPI_Info info, int *nkeys))
{
    struct MPI_ABI_Info *i;
    int rc = check_info(info, "MPI_Info_get_nkeys", &i);
    if (rc) return rc;
    if (!nkeys) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Info_get_nkeys", "NULL output");
    *nkeys = i->n;
    return MPI_SUCCESS;
}

MPI_DEF(int, Info_get_nthkey, (MPI_Info info, int n, char *key))
{
    struct MPI_ABI_Info *i;
    int rc = check_info(info, "MPI_Info_get_nthkey", &i);
    if (rc) return rc;
    if (n < 0 || n >= i->n) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Info_get_nthkey", "n = %d out of range", n);
    if (!key) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Info_get_nthkey", "NULL key");
    snprintf(key, MPI_MAX_INFO_KEY, "%s", i->keys[n]);
    return MPI_SUCCESS;
}

MPI_DEF(MPI_Info, Info_fromint, (int info))
{
    if (info == 0x130 || info == 0x131) return (MPI_Info)(uintptr_t)info;
    void *o = mpi_obj_at(MPI_K_INFO, info - MPI_HANDLE_INT_BASE);
    return o ? o : MPI_INFO_NULL;
}

MPI_DEF(int, Info_toint, (MPI_Info info))
{
    uintptr_t v = (uintptr_t)info;
    if (v < MPI_HANDLE_INT_BASE) return (int)v;
    int i = mpi_obj_index(MPI_K_INFO, info);
    return i < 0 ? 0x130 : MPI_HANDLE_INT_BASE + i;
}
