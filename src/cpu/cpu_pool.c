/*
 * Thread pool: workers sleep on a condition variable between jobs; a job is
 * (task, arg, n_tasks) plus an atomic counter from which every participating
 * thread takes the next task index until none is left.
 */
#include "cpu_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define CPU_POOL_MAX_THREADS 512

typedef struct cpu_pool {
    pthread_mutex_t lock;        /* guards the fields below */
    pthread_cond_t wake;         /* a new job was posted */
    pthread_cond_t done;         /* a worker finished its share */
    int n_workers;               /* threads started (besides callers) */
    uint64_t generation;         /* bumped for every job */
    int n_wanted;                /* workers taking part in the current job */
    int n_finished;              /* of those, how many are done */
    cpu_task_fn task;
    void *arg;
    int64_t n_tasks;
    atomic_int_fast64_t next;    /* next task index to hand out */
    atomic_int next_worker_id;   /* worker ids 1 .. n_wanted for this job */
} cpu_pool;

static cpu_pool pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
};
/* One job at a time across all callers of the library. */
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;

static void run_tasks(int worker) {
    for (;;) {
        int64_t t = atomic_fetch_add(&pool.next, 1);
        if (t >= pool.n_tasks) break;
        pool.task(pool.arg, t, worker);
    }
}

/* start: the generation current when the thread was created, so a worker
 * started for a job that is posted right after takes part in it. */
static void *worker_main(void *start) {
    uint64_t seen = (uint64_t)(uintptr_t)start;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.lock);
        seen = pool.generation;
        /* Take a worker id if this job still wants more threads. */
        int id = atomic_fetch_add(&pool.next_worker_id, 1);
        if (id > pool.n_wanted) continue;
        pthread_mutex_unlock(&pool.lock);
        run_tasks(id);
        pthread_mutex_lock(&pool.lock);
        if (++pool.n_finished == pool.n_wanted) pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* A child of fork() has none of the parent's workers: start from an empty pool. */
static void reset_in_child(void) {
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    pthread_mutex_init(&job_lock, NULL);
    pool.n_workers = 0;
}

/* Start workers until there are `want` of them (or as many as the system gives). */
static void grow_pool(int want) {
    static int registered;
    if (!registered) {
        pthread_atfork(NULL, NULL, reset_in_child);
        registered = 1;
    }
    while (pool.n_workers < want) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&th, &attr, worker_main, (void *)(uintptr_t)pool.generation);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        pool.n_workers++;
    }
}

int cpu_parallel_for(int64_t n_tasks, int n_threads, cpu_task_fn task, void *arg) {
    if (n_tasks <= 0) return 0;
    if (n_threads > CPU_POOL_MAX_THREADS) n_threads = CPU_POOL_MAX_THREADS;
    if (n_threads > n_tasks) n_threads = (int)n_tasks;
    if (n_threads <= 1) {
        for (int64_t t = 0; t < n_tasks; ++t) task(arg, t, 0);
        return 0;
    }
    pthread_mutex_lock(&job_lock);
    pthread_mutex_lock(&pool.lock);
    grow_pool(n_threads - 1);
    int extra = pool.n_workers < n_threads - 1 ? pool.n_workers : n_threads - 1;
    pool.task = task;
    pool.arg = arg;
    pool.n_tasks = n_tasks;
    atomic_store(&pool.next, 0);
    atomic_store(&pool.next_worker_id, 1);
    pool.n_wanted = extra;
    pool.n_finished = 0;
    pool.generation++;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    run_tasks(0); /* the caller is worker 0 */

    pthread_mutex_lock(&pool.lock);
    while (pool.n_finished < pool.n_wanted) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&job_lock);
    return 0;
}
