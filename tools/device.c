#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FA_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static char device_error[256];

const char *cli_device_error(void) { return device_error; }

#ifdef FA_HAVE_CUDA
static int cuda_ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 1;
    snprintf(device_error, sizeof device_error, "%s: %s", what, cudaGetErrorString(e));
    return 0;
}
#endif

int cli_device_support(void) {
#ifdef FA_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int cli_buffer_alloc(cli_buffer *b, size_t bytes, int on_device) {
    memset(b, 0, sizeof *b);
    b->bytes = bytes;
    b->on_device = on_device;
    b->host = malloc(bytes ? bytes : 1);
    if (!b->host) {
        snprintf(device_error, sizeof device_error, "out of host memory (%zu bytes)", bytes);
        return 0;
    }
    if (!on_device) {
        b->data = b->host;
        return 1;
    }
#ifdef FA_HAVE_CUDA
    return cuda_ok(cudaMalloc(&b->data, bytes ? bytes : 1), "cudaMalloc");
#else
    snprintf(device_error, sizeof device_error, "this build of flashattn cannot allocate GPU memory");
    return 0;
#endif
}

int cli_buffer_upload(cli_buffer *b) {
    if (!b->on_device || !b->bytes) return 1;
#ifdef FA_HAVE_CUDA
    return cuda_ok(cudaMemcpy(b->data, b->host, b->bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
#else
    return 0;
#endif
}

int cli_buffer_download(cli_buffer *b) {
    if (!b->on_device || !b->bytes) return 1;
#ifdef FA_HAVE_CUDA
    return cuda_ok(cudaMemcpy(b->host, b->data, b->bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
#else
    return 0;
#endif
}

int cli_buffer_poison(cli_buffer *b) {
    memset(b->host, 0xFF, b->bytes);
    if (!b->on_device || !b->bytes) return 1;
#ifdef FA_HAVE_CUDA
    return cuda_ok(cudaMemset(b->data, 0xFF, b->bytes), "cudaMemset");
#else
    return 0;
#endif
}

void cli_buffer_free(cli_buffer *b) {
#ifdef FA_HAVE_CUDA
    if (b->on_device && b->data) cudaFree(b->data);
#endif
    free(b->host);
    memset(b, 0, sizeof *b);
}

#ifdef FA_HAVE_CUDA
static cudaEvent_t timer_begin, timer_end;
#endif

int cli_device_timer_start(void) {
#ifdef FA_HAVE_CUDA
    if (!timer_begin && (!cuda_ok(cudaEventCreate(&timer_begin), "cudaEventCreate") ||
                         !cuda_ok(cudaEventCreate(&timer_end), "cudaEventCreate")))
        return 0;
    return cuda_ok(cudaEventRecord(timer_begin, 0), "cudaEventRecord");
#else
    snprintf(device_error, sizeof device_error, "this build of flashattn cannot time a GPU");
    return 0;
#endif
}

double cli_device_timer_stop_ms(void) {
#ifdef FA_HAVE_CUDA
    float ms = 0;
    if (!cuda_ok(cudaEventRecord(timer_end, 0), "cudaEventRecord") ||
        !cuda_ok(cudaEventSynchronize(timer_end), "cudaEventSynchronize") ||
        !cuda_ok(cudaEventElapsedTime(&ms, timer_begin, timer_end), "cudaEventElapsedTime"))
        return -1;
    return ms;
#else
    return -1;
#endif
}

double cli_device_copy_gbs(void) {
#ifdef FA_HAVE_CUDA
    const size_t bytes = (size_t)1 << 30; /* far beyond the L2 cache */
    void *src = NULL, *dst = NULL;
    double best = 0;
    if (cuda_ok(cudaMalloc(&src, bytes), "cudaMalloc") && cuda_ok(cudaMalloc(&dst, bytes), "cudaMalloc") &&
        cuda_ok(cudaMemset(src, 1, bytes), "cudaMemset")) {
        for (int i = 0; i < 6; ++i) { /* the first copy warms up; keep the fastest */
            if (!cli_device_timer_start()) break;
            if (!cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy")) break;
            double ms = cli_device_timer_stop_ms();
            if (ms <= 0) break;
            double gbs = 2.0 * (double)bytes / (ms * 1e-3) * 1e-9;
            if (i > 0 && gbs > best) best = gbs;
        }
    }
    cudaFree(src);
    cudaFree(dst);
    return best;
#else
    return 0;
#endif
}
