/*
 * Memory for the operands: a host copy always (inputs are made and checked
 * there), mirrored in CUDA device memory when the backend runs on a GPU.
 * The CUDA side works when the build links the CUDA runtime (see device.c).
 */
#ifndef FA_CLI_DEVICE_H
#define FA_CLI_DEVICE_H

#include <stddef.h>

typedef struct cli_buffer {
    void *host;     /* host copy, always allocated */
    void *data;     /* what the library is handed: host or device memory */
    size_t bytes;
    int on_device;
} cli_buffer;

/* Nonzero if this build of the tool can allocate CUDA memory. */
int cli_device_support(void);

/* Each returns 1 on success, 0 with cli_device_error() set. */
int cli_buffer_alloc(cli_buffer *b, size_t bytes, int on_device);
int cli_buffer_upload(cli_buffer *b);   /* host -> data */
int cli_buffer_download(cli_buffer *b); /* data -> host */
/* Fill host and device copies with 0xFF bytes: NaN in f32, f16 and bf16, so
 * an element the library forgets to write shows up in the check. */
int cli_buffer_poison(cli_buffer *b);
void cli_buffer_free(cli_buffer *b);

/*
 * GPU timing with CUDA events on the default stream: mark i is recorded after
 * the i-th queued call, so n calls queued back to back give n + 1 marks and n
 * intervals, measured without the host's launch overhead between them.
 */
int cli_device_marks_begin(int n_calls);  /* records mark 0 */
int cli_device_mark(int i);               /* records mark i (1..n_calls) */
/* Wait for the GPU; ms[i] = time between marks i and i + 1. */
int cli_device_marks_end(double *ms, int n_calls);

/* Device-to-device copy bandwidth in GB/s (bytes read plus bytes written),
 * the GPU's memory ceiling measured in this run; 0 on failure. */
double cli_device_copy_gbs(void);

const char *cli_device_error(void);

#endif /* FA_CLI_DEVICE_H */
