/* Hopper forward: placeholder until the TMA + wgmma kernels land. */
#include "sm90.h"

extern "C" int fa_sm90_fwd_supports(const fa_problem *p) { return 0; }
extern "C" size_t fa_sm90_fwd_workspace(const fa_problem *p, const fa_exec *x) { return 0; }
extern "C" fa_status fa_sm90_fwd(const fa_problem *p, const fa_exec *x) {
    return fa_set_error(FA_ERR_UNSUPPORTED, "sm90: Hopper kernels are not built");
}
