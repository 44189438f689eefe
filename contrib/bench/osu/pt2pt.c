/* Point-to-point benchmarks, as OSU defines them:
 *   latency    ping-pong between ranks 0 and 1; one-way time = round trip / 2
 *   bw         rank 0 posts a window of sends, rank 1 a window of receives,
 *              then a short ack; MB/s = window * size / time (MB = 10^6 B)
 *   bibw       both directions at once
 *   mbw-mr     pairs (i, i + n/2) stream like bw; aggregate MB/s and messages/s
 *   multi-lat  pairs (i, i + n/2) ping-pong at the same time; average latency
 * Ranks outside the measured pair(s) only take part in the barriers.
 * -d cuda A B: rank 0's buffers (the leaders' in mbw-mr, multi-lat) at A,
 * rank 1's (their partners') at B, as OSU; bw's 4-byte ack stays in host
 * memory. Validation fills and checks device buffers through host copies,
 * outside the timers. */
#include "osu.h"

#include <stdlib.h>
#include <string.h>

enum { TAG_DATA = 1, TAG_ACK = 2 };

static void barrier(void)
{
    bk_coll_args_t a = {.coll = BK_BARRIER};
    bk_coll(&a);
}

/* Ping-pong between me and peer; returns the one-way time per message in us
 * (0 on ranks that only wait). */
static double pingpong(size_t size, int me_first, int peer, const osu_pool_t *sp, const osu_pool_t *rp, long *errors)
{
    int iters = osu_iters(size), skip = osu_warmup(size);
    double t0 = 0, timer = 0;
    for (int i = 0; i < iters + skip; i++) {
        void *sb = osu_pool_get(sp, i), *rb = osu_pool_get(rp, i);
        /* Validation work stays outside the timer. */
        if (osu_opt.validate) {
            osu_pool_fill(sp, sb, size, bk_rank(), peer, i);
            t0 = bk_wtime();
        } else if (i == skip) {
            t0 = bk_wtime();
        }
        if (me_first) {
            bk_send(sb, size, peer, TAG_DATA);
            bk_recv(rb, size, peer, TAG_DATA);
        } else {
            bk_recv(rb, size, peer, TAG_DATA);
            bk_send(sb, size, peer, TAG_DATA);
        }
        if (osu_opt.validate) {
            if (i >= skip) timer += bk_wtime() - t0;
            *errors += (long)osu_pool_check(rp, rb, size, peer, bk_rank(), i);
        }
    }
    if (!osu_opt.validate) timer = bk_wtime() - t0;
    return timer * 1e6 / (2.0 * iters);
}

/* Window streaming from sender to receiver (both when bidirectional);
 * returns the seconds the timed iterations took. */
static double stream(size_t size, int sender, int receiver, int bidir, const osu_pool_t *sp, const osu_pool_t *rp,
                     bk_req_t *reqs, long *errors)
{
    int iters = osu_iters(size), skip = osu_warmup(size), w = osu_opt.window;
    int me = bk_rank(), peer = me == sender ? receiver : sender;
    int sends = bidir || me == sender, recvs = bidir || me == receiver;
    char ack[4] = {0};
    double t0 = 0, timer = 0;
    for (int i = 0; i < iters + skip; i++) {
        char *sb = osu_pool_get(sp, i), *rb = osu_pool_get(rp, i);
        int n = 0;
        if (osu_opt.validate && sends) osu_pool_fill(sp, sb, size, me, peer, i);
        if (osu_opt.validate || i == skip) t0 = bk_wtime();
        if (recvs)
            for (int k = 0; k < w; k++)
                bk_irecv(rb, size, peer, TAG_DATA, &reqs[n++]);
        if (sends)
            for (int k = 0; k < w; k++)
                bk_isend(sb, size, peer, TAG_DATA, &reqs[n++]);
        bk_waitall(n, reqs);
        /* One-way: the receiver acknowledges the window (OSU's 4-byte ack). */
        if (!bidir) {
            if (me == receiver)
                bk_send(ack, sizeof(ack), sender, TAG_ACK);
            else
                bk_recv(ack, sizeof(ack), receiver, TAG_ACK);
        }
        if (osu_opt.validate) {
            if (i >= skip) timer += bk_wtime() - t0;
            if (recvs) *errors += (long)osu_pool_check(rp, rb, size, peer, me, i);
        }
    }
    return osu_opt.validate ? timer : bk_wtime() - t0;
}

int osu_run_pt2pt(const osu_bench_t *b)
{
    int n = bk_size(), me = bk_rank(), kind = b->pt2pt_kind;
    int pairs_mode = kind == PT_MBW_MR || kind == PT_MULTI_LAT;
    if (n < 2) {
        if (me == 0) fprintf(stderr, "%s-osu-%s: needs at least 2 ranks\n", bk_short_name(), b->name);
        return 2;
    }
    /* latency, bw, bibw: ranks 0 and 1; mbw-mr, multi-lat: pairs (i, i + n/2).
     * Other ranks (an odd one out) only join the barriers and statistics. */
    int npairs = pairs_mode ? n / 2 : 1;
    int active = me < 2 * npairs;
    int peer = me < npairs ? me + npairs : me - npairs;
    int leader = me < npairs; /* sender / first pinger of its pair */
    const char *cols;
    switch (kind) {
    case PT_LATENCY:
    case PT_MULTI_LAT: cols = "# Size          Latency (us)"; break;
    case PT_MBW_MR: cols = "# Size                  MB/s        Messages/s"; break;
    default: cols = "# Size      Bandwidth (MB/s)"; break;
    }
    char colbuf[128];
    snprintf(colbuf, sizeof(colbuf), "%s%s", cols, osu_opt.validate ? "        Validation" : "");
    osu_print_header(b, colbuf);

    osu_pool_t sp, rp;
    char loc = !active ? 'H' : leader ? osu_opt.loc[0] : osu_opt.loc[1];
    osu_pool_init_at(&sp, osu_opt.max_size, loc);
    osu_pool_init_at(&rp, osu_opt.max_size, loc);
    bk_req_t *reqs = calloc(2 * (size_t)osu_opt.window, sizeof(*reqs));
    if (!reqs) bk_abort("out of memory for requests");
    long total_errors = 0;
    for (size_t size = osu_first_size(); size <= osu_opt.max_size; size = osu_next_size(size)) {
        long errors = 0;
        double value = 0, rate = -1;
        barrier();
        if (kind == PT_LATENCY || kind == PT_MULTI_LAT) {
            double lat = active ? pingpong(size, leader, peer, &sp, &rp, &errors) : 0;
            osu_stat_t s = osu_stat(lat); /* multi-lat: average over the ranks of the pairs */
            value = s.avg * n / (2 * npairs);
        } else {
            double secs =
                active ? stream(size, leader ? me : peer, leader ? peer : me, kind == PT_BIBW, &sp, &rp, reqs, &errors)
                       : 1;
            int iters = osu_iters(size);
            double msgs = (double)iters * osu_opt.window * (kind == PT_BIBW ? 2 : 1);
            /* Each pair's rate is measured by its leader (bibw: both directions'
             * bytes); the totals add the pairs up. */
            double my_bw = active && leader ? msgs * (double)size / secs / 1e6 : 0;
            double my_rate = active && leader ? msgs / secs : 0;
            osu_stat_t sbw = osu_stat(my_bw), srate = osu_stat(my_rate);
            value = sbw.avg * n;
            if (kind == PT_MBW_MR) rate = srate.avg * n;
        }
        errors = osu_errors_total(errors);
        total_errors += errors;
        if (me == 0) {
            if (kind == PT_MBW_MR)
                printf("%-10zu%18.2f%18.2f", size, value, rate);
            else
                printf("%-10zu%18.2f", size, value);
            if (osu_opt.validate) printf("%18s", osu_valid_text(errors));
            printf("\n");
            fflush(stdout);
        }
        int is_lat = kind == PT_LATENCY || kind == PT_MULTI_LAT;
        osu_stat_t lat = {value, value, value};
        osu_csv_row(b, size, is_lat ? &lat : NULL, is_lat ? -1 : value, rate, NULL, osu_iters(size),
                    osu_opt.validate ? !errors : -1);
    }
    free(reqs);
    osu_pool_free(&sp);
    osu_pool_free(&rp);
    return total_errors ? 1 : 0;
}
