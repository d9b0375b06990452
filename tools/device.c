#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The CUDA runtime, when the build has one. The command links the library
 * statically: a CUDA build brings the runtime along (it is one object, so all
 * of it), a CPU build does not. With FA_HAVE_CUDA the runtime's own header is
 * used. Without it, on ELF platforms, the few functions used here are declared
 * weak: they resolve to the runtime in a CUDA build and stay NULL in a CPU
 * build, so one source serves both and cli_device_support() asks at run time.
 */
#if defined(FA_HAVE_CUDA)
#include <cuda_runtime_api.h>
#define CLI_CUDA 1
#define CLI_CUDA_PRESENT() 1
#elif defined(__GNUC__) && defined(__ELF__)
#define CLI_CUDA 1
typedef int cudaError_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUstream_st *cudaStream_t;
enum { cudaSuccess = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
#define CLI_WEAK __attribute__((weak))
CLI_WEAK extern cudaError_t cudaMalloc(void **ptr, size_t bytes);
CLI_WEAK extern cudaError_t cudaFree(void *ptr);
CLI_WEAK extern cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, int kind);
CLI_WEAK extern cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, int kind, cudaStream_t s);
CLI_WEAK extern cudaError_t cudaMemset(void *ptr, int value, size_t bytes);
CLI_WEAK extern cudaError_t cudaEventCreate(cudaEvent_t *e);
CLI_WEAK extern cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
CLI_WEAK extern cudaError_t cudaEventSynchronize(cudaEvent_t e);
CLI_WEAK extern cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
CLI_WEAK extern const char *cudaGetErrorString(cudaError_t e);
/* Every function is there, or none: the runtime is one object. */
#define CLI_CUDA_PRESENT() (cudaMalloc != NULL && cudaEventElapsedTime != NULL && cudaGetErrorString != NULL)
#endif

static char device_error[256];

const char *cli_device_error(void) { return device_error; }

#ifdef CLI_CUDA
static int cuda_ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 1;
    snprintf(device_error, sizeof device_error, "%s: %s", what, cudaGetErrorString(e));
    return 0;
}
#endif

int cli_device_support(void) {
#ifdef CLI_CUDA
    return CLI_CUDA_PRESENT();
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
#ifdef CLI_CUDA
    if (!CLI_CUDA_PRESENT()) {
        snprintf(device_error, sizeof device_error, "this build of flashattn has no CUDA runtime");
        return 0;
    }
    return cuda_ok(cudaMalloc(&b->data, bytes ? bytes : 1), "cudaMalloc");
#else
    snprintf(device_error, sizeof device_error, "this build of flashattn cannot allocate GPU memory");
    return 0;
#endif
}

int cli_buffer_upload(cli_buffer *b) {
    if (!b->on_device || !b->bytes) return 1;
#ifdef CLI_CUDA
    return cuda_ok(cudaMemcpy(b->data, b->host, b->bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
#else
    return 0;
#endif
}

int cli_buffer_download(cli_buffer *b) {
    if (!b->on_device || !b->bytes) return 1;
#ifdef CLI_CUDA
    return cuda_ok(cudaMemcpy(b->host, b->data, b->bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
#else
    return 0;
#endif
}

int cli_buffer_poison(cli_buffer *b) {
    memset(b->host, 0xFF, b->bytes);
    if (!b->on_device || !b->bytes) return 1;
#ifdef CLI_CUDA
    return cuda_ok(cudaMemset(b->data, 0xFF, b->bytes), "cudaMemset");
#else
    return 0;
#endif
}

void cli_buffer_free(cli_buffer *b) {
#ifdef CLI_CUDA
    if (b->on_device && b->data) cudaFree(b->data);
#endif
    free(b->host);
    memset(b, 0, sizeof *b);
}

#ifdef CLI_CUDA
static cudaEvent_t *marks;
static int marks_allocated;
#endif

int cli_device_marks_begin(int n_calls) {
#ifdef CLI_CUDA
    if (!CLI_CUDA_PRESENT()) {
        snprintf(device_error, sizeof device_error, "this build of flashattn has no CUDA runtime");
        return 0;
    }
    if (n_calls + 1 > marks_allocated) {
        cudaEvent_t *grown = realloc(marks, sizeof(cudaEvent_t) * (size_t)(n_calls + 1));
        if (!grown) {
            snprintf(device_error, sizeof device_error, "out of host memory for CUDA events");
            return 0;
        }
        marks = grown;
        for (; marks_allocated < n_calls + 1; ++marks_allocated)
            if (!cuda_ok(cudaEventCreate(&marks[marks_allocated]), "cudaEventCreate")) return 0;
    }
    return cli_device_mark(0);
#else
    (void)n_calls;
    snprintf(device_error, sizeof device_error, "this build of flashattn cannot time a GPU");
    return 0;
#endif
}

int cli_device_mark(int i) {
#ifdef CLI_CUDA
    return cuda_ok(cudaEventRecord(marks[i], 0), "cudaEventRecord");
#else
    (void)i;
    return 0;
#endif
}

int cli_device_marks_end(double *ms, int n_calls) {
#ifdef CLI_CUDA
    if (!cuda_ok(cudaEventSynchronize(marks[n_calls]), "cudaEventSynchronize")) return 0;
    for (int i = 0; i < n_calls; ++i) {
        float t = 0;
        if (!cuda_ok(cudaEventElapsedTime(&t, marks[i], marks[i + 1]), "cudaEventElapsedTime")) return 0;
        ms[i] = t;
    }
    return 1;
#else
    (void)ms;
    (void)n_calls;
    return 0;
#endif
}

double cli_device_copy_gbs(void) {
#ifdef CLI_CUDA
    if (!CLI_CUDA_PRESENT()) return 0;
    const size_t bytes = (size_t)1 << 30; /* far beyond the L2 cache */
    void *src = NULL, *dst = NULL;
    double best = 0;
    if (cuda_ok(cudaMalloc(&src, bytes), "cudaMalloc") && cuda_ok(cudaMalloc(&dst, bytes), "cudaMalloc") &&
        cuda_ok(cudaMemset(src, 1, bytes), "cudaMemset")) {
        enum { COPIES = 6 };
        double ms[COPIES];
        int ok = cli_device_marks_begin(COPIES);
        for (int i = 0; ok && i < COPIES; ++i)
            ok = cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync") &&
                 cli_device_mark(i + 1);
        if (ok && cli_device_marks_end(ms, COPIES))
            for (int i = 1; i < COPIES; ++i) { /* the first copy warms up; keep the fastest */
                double gbs = ms[i] > 0 ? 2.0 * (double)bytes / (ms[i] * 1e-3) * 1e-9 : 0;
                if (gbs > best) best = gbs;
            }
    }
    cudaFree(src);
    cudaFree(dst);
    return best;
#else
    return 0;
#endif
}
