/*
 * flashattn check: run a case once on a backend (and on a second one with
 * --against), compare with the float64 reference, print every error.
 */
#include <math.h>
#include <stdio.h>

#include "commands.h"
#include "convert.h"
#include "run.h"

/* Max |a - b| over two backends' copies of one output (whole tensors). */
static double max_difference(const cli_buffer *a, const cli_buffer *b, fa_dtype t) {
    double e = 0;
    int64_t n = (int64_t)(a->bytes / fa_dtype_size(t));
    for (int64_t i = 0; i < n; ++i) {
        double x = fa_load_f(a->host, t, i), y = fa_load_f(b->host, t, i);
        if (isinf(x) && x == y) continue; /* both -inf: an empty row in both */
        double d = fabs(x - y);
        if (!(d <= e)) e = d; /* NaN propagates */
    }
    return e;
}

/* check runs each direction once, cold: its times mean nothing, so they are not shown. */
static void print_check(const cli_config *c, cli_case_run *cr, const cli_machine *m) {
    cr->fwd.timed = cr->bwd.timed = 0;
    const cli_result *rows[2] = {&cr->fwd, cr->have_bwd ? &cr->bwd : NULL};
    for (int i = 0; i < 2; ++i) {
        if (!rows[i]) continue;
        if (c->json) {
            cli_print_result_json(stdout, c, rows[i], m);
            continue;
        }
        cli_print_result_row(stdout, rows[i]);
        cli_print_check_detail(stdout, rows[i]);
    }
}

int cli_check_main(int argc, char **argv) {
    cli_config c;
    cli_target t, other;
    cli_machine m;
    int rc = cli_run_prepare(CLI_CHECK, argc, argv, &c, &t, &m);
    if (rc >= 0) return rc;
    if (c.has_against && !cli_pick_target(c.against, &other)) return 1;
    if (!c.json) {
        printf("flashattn %s check\n", fa_version());
        cli_print_case_header(stdout, &c);
    }
    c.repeat = 1;
    c.warmup = 0;
    cli_case_run a, b;
    cli_run_case(&c, &t, &a);
    print_check(&c, &a, &m);
    int failed = cli_result_failed(&a.fwd) || (a.have_bwd && cli_result_failed(&a.bwd));
    if (c.has_against) {
        cli_run_case(&c, &other, &b);
        print_check(&c, &b, &m);
        failed |= cli_result_failed(&b.fwd) || (b.have_bwd && cli_result_failed(&b.bwd));
        if (a.have_workload && b.have_workload && !a.fwd.error[0] && !b.fwd.error[0] && !c.json) {
            printf("%s vs %s, max |difference| over all outputs: out %.3e  lse %.3e", fa_backend_name(t.backend),
                   fa_backend_name(other.backend), max_difference(&a.w.out, &b.w.out, fa_out_dtype(c.dtype)),
                   max_difference(&a.w.lse, &b.w.lse, FA_F32));
            if (a.have_bwd && !a.bwd.error[0] && !b.bwd.error[0])
                printf("  dq %.3e  dk %.3e  dv %.3e", max_difference(&a.w.dq, &b.w.dq, c.dtype),
                       max_difference(&a.w.dk, &b.w.dk, c.dtype), max_difference(&a.w.dv, &b.w.dv, c.dtype));
            printf("\n");
        }
        cli_case_free(&b);
    }
    cli_case_free(&a);
    if (!c.json) printf("%s\n", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}
