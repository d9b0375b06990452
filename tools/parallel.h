/*
 * A plain parallel loop over independent work units, for the checks.
 */
#ifndef FA_CLI_PARALLEL_H
#define FA_CLI_PARALLEL_H

/* Call fn(arg, u) for every u in [0, n) on up to `threads` threads. */
void cli_parallel_for(int n, int threads, void (*fn)(void *arg, int unit), void *arg);

/* Online CPU cores. */
int cli_cpu_count(void);

#endif /* FA_CLI_PARALLEL_H */
