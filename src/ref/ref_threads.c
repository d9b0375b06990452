/*
 * Running the reference's independent work items on several threads. Item
 * t goes to thread t % n (a fixed assignment, so the result never depends
 * on scheduling), and each item writes only its own outputs, so the answer
 * is the same bit for bit whatever the thread count.
 */
#include <pthread.h>
#include <stdlib.h>

#include "ref.h"

typedef struct ref_share {
    fa_ref_worker_fn fn;
    void *arg;
    int64_t first, step, count;
    fa_status status;
} ref_share;

static void *ref_share_main(void *p) {
    ref_share *s = (ref_share *)p;
    s->status = s->fn(s->arg, s->first, s->step, s->count);
    return NULL;
}

fa_status fa_ref_run_threads(int threads, int64_t count, fa_ref_worker_fn fn, void *arg) {
    if (threads > count) threads = (int)count;
    if (threads <= 1) return fn(arg, 0, 1, count);

    ref_share *shares = (ref_share *)calloc((size_t)threads, sizeof *shares);
    pthread_t *ids = (pthread_t *)calloc((size_t)threads, sizeof *ids);
    int *started = (int *)calloc((size_t)threads, sizeof *started);
    if (!shares || !ids || !started) { /* fall back to one thread */
        free(shares);
        free(ids);
        free(started);
        return fn(arg, 0, 1, count);
    }
    for (int t = 0; t < threads; ++t) shares[t] = (ref_share){fn, arg, t, threads, count, FA_OK};
    /* thread 0's share runs on the caller; a thread that cannot start leaves its share to the caller too */
    for (int t = 1; t < threads; ++t) started[t] = pthread_create(&ids[t], NULL, ref_share_main, &shares[t]) == 0;
    ref_share_main(&shares[0]);
    for (int t = 1; t < threads; ++t) {
        if (started[t])
            pthread_join(ids[t], NULL);
        else
            ref_share_main(&shares[t]);
    }

    fa_status st = FA_OK;
    for (int t = 0; t < threads && st == FA_OK; ++t) st = shares[t].status;
    /* a worker's message went to its own thread's error slot: restate it here */
    if (st != FA_OK && shares[0].status == FA_OK)
        fa_set_error(st, "reference backend: a worker thread failed (%s)", fa_status_name(st));
    free(shares);
    free(ids);
    free(started);
    return st;
}
