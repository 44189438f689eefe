#include "harness.h"

#include "op.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A port below the kernel's ephemeral range (ip_local_port_range), free
 * now: bind(0) elsewhere (a test's own listener, a store) never hands it
 * out, so a test whose store comes up seconds later (a late rank 0) does
 * not find another test's listener there. A random one of the range's
 * ports, tried until one binds; bind(0) where the range leaves no room. */
static int bind_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons((uint16_t)port)};
    socklen_t len = sizeof(sa);
    int got = -1;
    if (fd < 0) return -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        got = ntohs(sa.sin_port);
    close(fd);
    return got;
}

void th_single_env(void)
{
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("PMIX_RANK");
    unsetenv("PMIX_NAMESPACE");
    setenv("WEFT_BOOTSTRAP", "single", 1);
}

int th_free_port(void)
{
    int lo = 32768; /* the range's low end */
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d", &lo) != 1) lo = 32768;
        fclose(f);
    }
    if (lo > 12000)
        for (int i = 0; i < 64; i++) {
            uint32_t r = 0;
            if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) break;
            int port = bind_port(10000 + (int)(r % (uint32_t)(lo - 10000)));
            if (port > 0) return port;
        }
    return bind_port(0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

th_result_t th_run(int n, th_body_fn body, void *arg, double timeout_s, const char *const *env)
{
    th_result_t res;
    pid_t pids[64];
    int done[64] = {0};
    int port = th_free_port();
    char buf[32], secret[65];
    uint8_t raw[32];

    memset(&res, 0, sizeof(res));
    res.nranks = n;
    if (n < 1 || n > 64 || port < 0) {
        res.failed = n > 0 ? n : 1;
        return res;
    }
    /* A fresh job secret per run, as weftrun gives its ranks (env may override or clear it). */
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        res.failed = n;
        return res;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(secret + 2 * i, 3, "%02x", raw[i]);
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            snprintf(buf, sizeof(buf), "%d", r);
            setenv("RANK", buf, 1);
            setenv("LOCAL_RANK", buf, 1);
            snprintf(buf, sizeof(buf), "%d", n);
            setenv("WORLD_SIZE", buf, 1);
            setenv("LOCAL_WORLD_SIZE", buf, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            snprintf(buf, sizeof(buf), "%d", port);
            setenv("MASTER_PORT", buf, 1);
            setenv("WEFT_BOOTSTRAP", "env", 1);
            setenv("WEFT_JOB_SECRET", secret, 1);
            /* The harness's own store, also when the test runs under torchrun. */
            unsetenv("TORCHELASTIC_USE_AGENT_STORE");
            unsetenv("TORCHELASTIC_RUN_ID");
            for (int i = 0; env && env[i]; i++)
                putenv(strdup(env[i]));
            /* Die with the test process rather than linger. */
            alarm((unsigned)timeout_s + 5);
            int rc = body(r, n, arg);
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
        pids[r] = pid;
        res.exit_code[r] = -1;
    }
    double deadline = now_s() + timeout_s;
    int remaining = n;
    while (remaining > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            for (int r = 0; r < n; r++) {
                if (pids[r] == pid && !done[r]) {
                    done[r] = 1;
                    remaining--;
                    res.exit_code[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                }
            }
            continue;
        }
        if (now_s() > deadline) {
            res.timed_out = 1;
            for (int r = 0; r < n; r++)
                if (!done[r]) {
                    fprintf(stderr, "harness: rank %d still running after %.0f s, killing it\n", r, timeout_s);
                    kill(pids[r], SIGKILL);
                }
            for (int r = 0; r < n; r++)
                if (!done[r]) {
                    waitpid(pids[r], NULL, 0);
                    res.exit_code[r] = -1;
                }
            break;
        }
        usleep(2000);
    }
    for (int r = 0; r < n; r++)
        if (res.exit_code[r] != 0) res.failed++;
    return res;
}

static inline uint8_t pattern_byte(size_t i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (uint8_t)(x ^ (x >> 17));
}

void th_fill(void *buf, size_t bytes, unsigned seed)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < bytes; i++)
        p[i] = pattern_byte(i, seed);
}

int th_verify(const void *buf, size_t bytes, unsigned seed, size_t *bad_index)
{
    const uint8_t *p = buf;
    for (size_t i = 0; i < bytes; i++)
        if (p[i] != pattern_byte(i, seed)) {
            if (bad_index) *bad_index = i;
            return 0;
        }
    return 1;
}

static uint32_t mix(unsigned seed, int rank, size_t i, int salt)
{
    uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)rank * 0xBF58476D1CE4E5B9ull ^
                 (uint64_t)i * 0x94D049BB133111EBull ^ (uint64_t)salt * 0x2545F4914F6CDD1Dull;
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 29);
}

void th_fill_input(void *buf, weft_dtype_t d, int64_t n, unsigned seed, int rank, int salt)
{
    for (int64_t i = 0; i < n; i++) {
        int v = (int)(mix(seed, rank, (size_t)i, salt) % 5) - 2;
        unsigned u = mix(seed, rank, (size_t)i, salt) % 5;
        switch (d) {
        case WEFT_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
        case WEFT_UINT8: ((uint8_t *)buf)[i] = (uint8_t)u; break;
        case WEFT_BYTE: ((uint8_t *)buf)[i] = (uint8_t)mix(seed, rank, (size_t)i, salt + 1); break;
        case WEFT_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
        case WEFT_UINT16: ((uint16_t *)buf)[i] = (uint16_t)u; break;
        case WEFT_INT32: ((int32_t *)buf)[i] = v; break;
        case WEFT_UINT32: ((uint32_t *)buf)[i] = u; break;
        case WEFT_INT64: ((int64_t *)buf)[i] = v; break;
        case WEFT_UINT64: ((uint64_t *)buf)[i] = u; break;
        case WEFT_FLOAT16: ((uint16_t *)buf)[i] = weft_float_to_fp16((float)v); break;
        case WEFT_BFLOAT16: ((uint16_t *)buf)[i] = weft_float_to_bf16((float)v); break;
        case WEFT_FLOAT32: ((float *)buf)[i] = (float)v; break;
        case WEFT_FLOAT64: ((double *)buf)[i] = (double)v; break;
        default: break;
        }
    }
}

void *th_reference(weft_dtype_t d, weft_op_t op, int64_t n, unsigned seed, int lo, int hi, int salt)
{
    size_t es = weft_dtype_size(d);
    char *ref = calloc((size_t)n + 1, es), *tmp = calloc((size_t)n + 1, es);
    th_fill_input(ref, d, n, seed, lo, salt);
    for (int r = lo + 1; r < hi; r++) {
        th_fill_input(tmp, d, n, seed, r, salt);
        weft_op_reduce(op, d, ref, tmp, (size_t)n);
    }
    weft_op_finalize(op, d, ref, (size_t)n, hi - lo);
    free(tmp);
    return ref;
}

weft_comm_t th_forced(weft_comm_t w, const char *coll, const char *alg)
{
    char key[64];
    weft_options_t o;
    weft_comm_t c;
    snprintf(key, sizeof(key), "%s_algorithm", coll);
    TH_OK(weft_options_create(&o));
    TH_OK(weft_options_set_hint(o, key, alg));
    TH_OK(weft_comm_dup(w, o, &c));
    TH_OK(weft_options_free(&o));
    return c;
}

char *th_stderr_of(void (*fn)(void *), void *arg)
{
    FILE *f = tmpfile();
    if (!f) {
        fn(arg);
        return calloc(1, 1);
    }
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(f), 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    long n = ftell(f);
    char *text = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
    rewind(f);
    if (text && n > 0 && fread(text, 1, (size_t)n, f) != (size_t)n) text[0] = '\0';
    fclose(f);
    return text;
}

struct th_board {
    _Atomic int ready[16];
    unsigned char data[16][256];
};

th_board_t *th_board_new(void)
{
    void *p = mmap(NULL, sizeof(th_board_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memset(p, 0, sizeof(th_board_t));
    return p;
}

void th_board_free(th_board_t *b)
{
    if (b) munmap(b, sizeof(*b));
}

void th_board_post(th_board_t *b, int slot, const void *data, size_t len)
{
    memcpy(b->data[slot], data, len < sizeof(b->data[slot]) ? len : sizeof(b->data[slot]));
    atomic_store(&b->ready[slot], 1);
}

int th_board_wait(th_board_t *b, int slot, void *data, size_t len, double timeout_s)
{
    double deadline = now_s() + timeout_s;
    while (!atomic_load(&b->ready[slot])) {
        if (now_s() > deadline) return -1;
        usleep(1000);
    }
    memcpy(data, b->data[slot], len < sizeof(b->data[slot]) ? len : sizeof(b->data[slot]));
    return 0;
}

th_result_t th_run_with_board(int n, th_body_fn body, double timeout_s)
{
    th_board_t *b = th_board_new();
    if (!b) {
        th_result_t r = {.nranks = n, .failed = n};
        return r;
    }
    th_result_t r = th_run(n, body, b, timeout_s, NULL);
    th_board_free(b);
    return r;
}

void th_nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

double th_cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}
