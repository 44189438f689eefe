/* weftrun: start N local ranks with the env bootstrap (as torchrun's
 * standalone mode does): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT, and a fresh random WEFT_JOB_SECRET (unless one
 * is set already) with which the ranks prove to rank 0's store that they
 * belong to this job. If a rank fails, the others get a grace period, then
 * SIGTERM, then SIGKILL; the exit status is the first failure's. Does not
 * link libweft: it only sets variables and forks.
 *
 * The store's port is bound and listened on here, before any rank starts,
 * and the socket handed to rank 0 (WEFT_STORE_FD): a port chosen, closed
 * and bound again later could be taken in between by anyone on the host,
 * and the job would fail (or talk to the squatter). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 4096

static volatile sig_atomic_t got_signal;
static void on_signal(int sig)
{
    got_signal = sig;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A socket bound to addr:port (port 0: one the kernel picks) and
 * listening, close-on-exec (only rank 0 keeps it); its port in *bound.
 * -1 with errno and *what set on failure. */
static int store_listener(const char *addr, int port, int *bound, const char **what)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res;
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    int gai = getaddrinfo(addr, service, &hints, &res), fd = -1;
    if (gai) {
        *what = gai_strerror(gai);
        errno = EINVAL;
        return -1;
    }
    *what = NULL;
    for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_storage sa;
        socklen_t len = sizeof(sa);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 4096) ||
            getsockname(fd, (struct sockaddr *)&sa, &len)) {
            int e = errno;
            close(fd);
            fd = -1;
            errno = e;
            continue;
        }
        *bound = ntohs(sa.ss_family == AF_INET ? ((struct sockaddr_in *)&sa)->sin_port
                                               : ((struct sockaddr_in6 *)&sa)->sin6_port);
    }
    freeaddrinfo(res);
    return fd;
}

/* 256 random bits as 64 hex digits: what the ranks prove membership with.
 * Only the processes weftrun starts (and the same user, through
 * /proc/PID/environ) can read it. Returns 0, or an errno value. */
static int make_secret(char out[65])
{
    unsigned char raw[32];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t k = getrandom(raw + got, sizeof(raw) - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno;
        got += (size_t)k;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    memset(raw, 0, sizeof(raw));
    return 0;
}

static int has(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weftrun -n N [--addr A] [--port P] [--timeout S] [--grace S] program [args...]\n"
            "  -n N         ranks to start on this host (1..%d)\n"
            "  --addr A     MASTER_ADDR (default 127.0.0.1)\n"
            "  --port P     MASTER_PORT (default: a free port; weftrun listens on it and hands the socket to rank 0)\n"
            "  --timeout S  kill the job after S seconds (default: none)\n"
            "  --grace S    after a rank fails, seconds before the others are terminated (default 10)\n"
            "  -h, --help   this text\n"
            "The ranks get a fresh random WEFT_JOB_SECRET unless WEFT_JOB_SECRET or WEFT_JOB_SECRET_FILE is set.\n",
            MAX_RANKS);
}

/* A usage error: what is wrong (if anything in particular), then the usage. */
static int bad_usage(const char *what, const char *arg)
{
    if (what) fprintf(stderr, "weftrun: %s%s%s%s\n", what, arg ? " '" : "", arg ? arg : "", arg ? "'" : "");
    usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    int n = 0, port = 0, i;
    const char *addr = "127.0.0.1", *n_text = NULL;
    double timeout = 0, grace = 10;
    if (argc < 2) return bad_usage(NULL, NULL);
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        int is_n = !strcmp(a, "-n") || !strcmp(a, "-np");
        if (!is_n && strcmp(a, "--addr") && strcmp(a, "--port") && strcmp(a, "--timeout") && strcmp(a, "--grace"))
            return bad_usage("unknown option", a);
        if (i + 1 >= argc) return bad_usage("no value after", a);
        const char *v = argv[++i];
        if (is_n) {
            n_text = v;
            n = atoi(v);
        } else if (!strcmp(a, "--addr")) {
            addr = v;
        } else if (!strcmp(a, "--port")) {
            port = atoi(v);
        } else if (!strcmp(a, "--timeout")) {
            timeout = atof(v);
        } else {
            grace = atof(v);
        }
    }
    if (!n_text) return bad_usage("-n N is required", NULL);
    if (n < 1 || n > MAX_RANKS) {
        fprintf(stderr, "weftrun: -n %s: must be 1..%d\n", n_text, MAX_RANKS);
        return 2;
    }
    if (i >= argc) return bad_usage("no program to start", NULL);
    const char *why = NULL;
    int want = port > 0 ? port : 0, store_fd = store_listener(addr, want, &port, &why);
    if (store_fd < 0) {
        fprintf(stderr, "weftrun: cannot listen on %s port %d%s for rank 0's store: %s\n", addr, want,
                want ? "" : " (any free one)", why ? why : strerror(errno));
        return 1;
    }
    /* A secret the user gave (the same on several hosts, from a file) is theirs to keep. */
    char secret[65] = "";
    int err;
    if (!has("WEFT_JOB_SECRET") && !has("WEFT_JOB_SECRET_FILE") && (err = make_secret(secret)) != 0) {
        fprintf(stderr, "weftrun: no random job secret (getrandom: %s)\n", strerror(err));
        return 1;
    }
    pid_t *pids = calloc((size_t)n, sizeof(pid_t));
    if (!pids) return 1;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    char buf[32];
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "weftrun: fork failed: %s\n", strerror(errno));
            return 1;
        }
        if (pid == 0) {
            snprintf(buf, sizeof(buf), "%d", r);
            setenv("RANK", buf, 1);
            setenv("LOCAL_RANK", buf, 1);
            snprintf(buf, sizeof(buf), "%d", n);
            setenv("WORLD_SIZE", buf, 1);
            setenv("LOCAL_WORLD_SIZE", buf, 1);
            setenv("MASTER_ADDR", addr, 1);
            snprintf(buf, sizeof(buf), "%d", port);
            setenv("MASTER_PORT", buf, 1);
            if (secret[0]) setenv("WEFT_JOB_SECRET", secret, 1);
            if (r == 0) { /* rank 0 serves the store on weftrun's socket; the others do not get it */
                snprintf(buf, sizeof(buf), "%d", store_fd);
                setenv("WEFT_STORE_FD", buf, 1);
                (void)fcntl(store_fd, F_SETFD, 0);
            } else {
                unsetenv("WEFT_STORE_FD");
            }
            execvp(argv[i], &argv[i]);
            fprintf(stderr, "weftrun: cannot run %s: %s\n", argv[i], strerror(errno));
            _exit(127);
        }
        pids[r] = pid;
    }
    close(store_fd); /* rank 0 has it */
    int remaining = n, first_fail = 0, failed_rank = -1, term_sent = 0;
    double start = now(), fail_time = 0;
    while (remaining > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            for (int r = 0; r < n; r++)
                if (pids[r] == pid) {
                    pids[r] = 0;
                    remaining--;
                    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                    if (code != 0 && !first_fail) {
                        first_fail = code;
                        failed_rank = r;
                        fail_time = now();
                        fprintf(stderr, "weftrun: rank %d exited with status %d\n", r, code);
                    }
                }
            continue;
        }
        int sig_now =
            got_signal || (timeout > 0 && now() - start > timeout) || (first_fail && now() - fail_time > grace);
        if (sig_now && !term_sent) {
            if (timeout > 0 && now() - start > timeout)
                fprintf(stderr, "weftrun: job exceeded --timeout %.0f s, terminating\n", timeout);
            for (int r = 0; r < n; r++)
                if (pids[r]) kill(pids[r], SIGTERM);
            term_sent = 1;
            fail_time = now();
            if (!first_fail) first_fail = 124;
        } else if (term_sent && now() - fail_time > 5) {
            for (int r = 0; r < n; r++)
                if (pids[r]) kill(pids[r], SIGKILL);
        }
        usleep(10000);
    }
    (void)failed_rank;
    free(pids);
    return first_fail;
}
