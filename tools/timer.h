/*
 * Wall-clock timing on the host and median of repeated measurements.
 */
#ifndef FA_CLI_TIMER_H
#define FA_CLI_TIMER_H

/* Seconds on a monotonic clock. */
double cli_now(void);

/* Median of n values (sorts v in place); 0 for n == 0. */
double cli_median(double *v, int n);

#endif /* FA_CLI_TIMER_H */
