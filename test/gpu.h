/* The CUDA driver for the GPU tests, opened at run time (the tests build
 * and run, skipping, where there is no driver or no device). */
#ifndef WEFT_TEST_GPU_H
#define WEFT_TEST_GPU_H

#include "weft.h"

#include <stddef.h>

/* In a Criterion test: skips it, with the reason, where no device is usable. */
#define GPU_NEED()                                                                                                     \
    do {                                                                                                               \
        char gpu_why_[256];                                                                                            \
        if (!gpu_available(gpu_why_, sizeof(gpu_why_))) cr_skip_test("no CUDA device: %s", gpu_why_);                  \
    } while (0)

/* In a forked child, so the calling process never initialises CUDA
 * (a child forked after that could not use it): 1 when a device is
 * usable, else 0 with the reason in why. */
int gpu_available(char *why, size_t len);
/* In a rank's process: opens the driver and makes device LOCAL_RANK % count's primary
 * context current (every rank of the one-GPU host shares it). 0 or -1. */
int gpu_open(void);
/* In a rank: gpu_open, then weft_init; exits with a message on failure. */
weft_comm_t gpu_weft_start(void);
/* "WEFT_LOG_LEVEL=<WEFT_TEST_LOG_LEVEL or error>" for the ranks' environment
 * (WEFT_TEST_LOG_LEVEL=debug shows their logs when one fails). */
const char *gpu_log_level_env(void);
void *gpu_alloc(size_t bytes);
void gpu_free(void *p);
int gpu_upload(void *dev, const void *host, size_t bytes);
int gpu_download(void *host, const void *dev, size_t bytes);
int gpu_memset(void *dev, unsigned char v, size_t bytes);
/* Streams and CUDA graphs (stream capture, relaxed mode): NULL / -1 on failure. */
void *gpu_stream(void);
int gpu_stream_sync(void *stream);
/* n 32-bit words of value v, queued on stream (not waited for). */
int gpu_memset32_async(void *dev, unsigned v, size_t n, void *stream);
void gpu_stream_free(void *stream);
/* Holds a stream: it waits until gpu_hold_release sets the returned word
 * (pinned host memory; NULL on failure); gpu_hold_free once it passed. */
volatile unsigned *gpu_hold(void *stream);
void gpu_hold_release(volatile unsigned *word);
void gpu_hold_free(volatile unsigned *word);
/* 1 while work queued on the stream is not done, 0 when it is all done, -1 on error. */
int gpu_stream_busy(void *stream);
int gpu_capture_begin(void *stream);
void *gpu_capture_end(void *stream); /* the instantiated graph */
int gpu_graph_launch(void *exec, void *stream);
void gpu_graph_free(void *exec);

#endif
