/* Status names and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>

#include "backend.h"

#if defined(_MSC_VER)
#define FA_THREAD_LOCAL __declspec(thread)
#else
#define FA_THREAD_LOCAL _Thread_local
#endif

static FA_THREAD_LOCAL char last_error[512];

fa_status fa_set_error(fa_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

/* Every public entry point starts by clearing the message. */
void fa_clear_error(void) { last_error[0] = '\0'; }

const char *fa_last_error(void) { return last_error; }

const char *fa_status_name(fa_status s) {
    switch (s) {
    case FA_OK: return "FA_OK";
    case FA_ERR_NULL_POINTER: return "FA_ERR_NULL_POINTER";
    case FA_ERR_SHAPE: return "FA_ERR_SHAPE";
    case FA_ERR_STRIDE: return "FA_ERR_STRIDE";
    case FA_ERR_DTYPE: return "FA_ERR_DTYPE";
    case FA_ERR_HEAD_DIM: return "FA_ERR_HEAD_DIM";
    case FA_ERR_OPTION: return "FA_ERR_OPTION";
    case FA_ERR_SEQLENS: return "FA_ERR_SEQLENS";
    case FA_ERR_BLOCK_TABLE: return "FA_ERR_BLOCK_TABLE";
    case FA_ERR_OVERFLOW: return "FA_ERR_OVERFLOW";
    case FA_ERR_DEVICE: return "FA_ERR_DEVICE";
    case FA_ERR_BACKEND: return "FA_ERR_BACKEND";
    case FA_ERR_UNSUPPORTED: return "FA_ERR_UNSUPPORTED";
    case FA_ERR_WORKSPACE: return "FA_ERR_WORKSPACE";
    case FA_ERR_OUT_OF_MEMORY: return "FA_ERR_OUT_OF_MEMORY";
    case FA_ERR_CUDA: return "FA_ERR_CUDA";
    case FA_ERR_INTERNAL: return "FA_ERR_INTERNAL";
    }
    return "FA_ERR_UNKNOWN";
}
