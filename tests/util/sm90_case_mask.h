/*
 * The mask of a Hopper test case, set on its problem: the schedule test and
 * the device self-test describe a case by (causal, top_left, wl, wr), with a
 * negative window side meaning unbounded and a causal case ignoring both.
 * Needs the fa_problem of src/api/backend.h.
 */
#ifndef FA_TEST_SM90_CASE_MASK_H
#define FA_TEST_SM90_CASE_MASK_H

static inline void sm90_case_mask(fa_problem *p, int causal, int top_left, int wl, int wr) {
    p->window_left = causal ? FA_UNBOUNDED : (wl < 0 ? FA_UNBOUNDED : wl);
    p->window_right = causal ? 0 : (wr < 0 ? FA_UNBOUNDED : wr); /* causal: no key right of the diagonal */
    p->has_mask = p->window_left < FA_UNBOUNDED || p->window_right < FA_UNBOUNDED;
    p->top_left = top_left;
}

#endif
