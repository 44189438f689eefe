/* Passes a token around the ring of ranks, LAPS times. Each rank adds its
 * rank to the token, so every lap must add 0 + 1 + ... + (size-1). */
#include <stdint.h>
#include <stdio.h>
#include <weft.h>

#define LAPS 10
#define TAG  7

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        if (rc_ != WEFT_SUCCESS) {                                                                                     \
            fprintf(stderr, "%s failed: %s: %s\n", #call, weft_strerror(rc_), weft_last_error());                      \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

int main(int argc, char **argv)
{
    int rank, size;
    CHECK(weft_init(&argc, &argv));
    weft_comm_t world = weft_comm_world();
    CHECK(weft_comm_rank(world, &rank));
    CHECK(weft_comm_size(world, &size));
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int64_t token = 0, per_lap = (int64_t)size * (size - 1) / 2;

    for (int lap = 0; lap < LAPS; lap++) {
        if (rank == 0) {
            token += rank;
            CHECK(weft_send(&token, 1, WEFT_INT64, next, TAG, world));
            CHECK(weft_recv(&token, 1, WEFT_INT64, prev, TAG, world, NULL));
            if (token != per_lap * (lap + 1)) {
                fprintf(stderr, "ring: lap %d: token %lld, expected %lld\n", lap, (long long)token,
                        (long long)(per_lap * (lap + 1)));
                return 1;
            }
        } else {
            CHECK(weft_recv(&token, 1, WEFT_INT64, prev, TAG, world, NULL));
            token += rank;
            CHECK(weft_send(&token, 1, WEFT_INT64, next, TAG, world));
        }
    }
    if (rank == 0) printf("ring: token passed %d ranks x %d laps, ok\n", size, LAPS);
    CHECK(weft_finalize());
    return 0;
}
