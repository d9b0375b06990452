#define _POSIX_C_SOURCE 200809L /* sysconf */
#include "parallel.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct loop {
    void (*fn)(void *arg, int unit);
    void *arg;
    int n;
    int next;              /* next unit to hand out */
    pthread_mutex_t lock;
} loop;

static void *worker(void *p) {
    loop *l = p;
    for (;;) {
        pthread_mutex_lock(&l->lock);
        int u = l->next++;
        pthread_mutex_unlock(&l->lock);
        if (u >= l->n) return NULL;
        l->fn(l->arg, u);
    }
}

void cli_parallel_for(int n, int threads, void (*fn)(void *arg, int unit), void *arg) {
    loop l = {fn, arg, n, 0, PTHREAD_MUTEX_INITIALIZER};
    if (threads > n) threads = n;
    if (threads < 1) threads = 1;
    pthread_t *ids = threads > 1 ? malloc(sizeof(pthread_t) * (size_t)(threads - 1)) : NULL;
    int started = 0;
    for (int t = 0; ids && t < threads - 1; ++t)
        if (pthread_create(&ids[t], NULL, worker, &l) == 0) ++started;
    worker(&l); /* the calling thread works too */
    for (int t = 0; t < started; ++t) pthread_join(ids[t], NULL);
    free(ids);
    pthread_mutex_destroy(&l.lock);
}

int cli_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}
