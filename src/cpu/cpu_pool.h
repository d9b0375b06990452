/*
 * A process-wide pool of worker threads, created lazily on first use and
 * reused by every call. cpu_parallel_for() runs task(arg, t, worker) for
 * t = 0 .. n_tasks - 1 on up to n_threads threads (the caller included);
 * tasks are handed out in increasing t from a shared counter, so put the
 * biggest tasks first. worker is in [0, n_threads) and names per-thread
 * scratch. Calls from different threads are serialised.
 */
#ifndef FA_CPU_POOL_H
#define FA_CPU_POOL_H

#include <stdint.h>

typedef void (*cpu_task_fn)(void *arg, int64_t t, int worker);

/* Returns 0, or -1 if no thread could be started (then nothing ran). */
int cpu_parallel_for(int64_t n_tasks, int n_threads, cpu_task_fn task, void *arg);

#endif /* FA_CPU_POOL_H */
