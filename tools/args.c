#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What a flag does with its value. */
typedef enum flag_kind {
    FLAG_SWITCH,  /* no value: sets *target to `value` */
    FLAG_INT,     /* integer >= min */
    FLAG_FLOAT,   /* finite float in [fmin, fmax) */
    FLAG_U64,     /* unsigned 64-bit integer */
    FLAG_DTYPE,
    FLAG_WINDOW,  /* "L,R" */
    FLAG_BACKEND
} flag_kind;

typedef struct flag_spec {
    const char *name;
    flag_kind kind;
    size_t offset;    /* field in cli_config */
    int64_t min;      /* FLAG_INT: smallest accepted value; FLAG_SWITCH: value stored */
    int commands;     /* CLI_BENCH | CLI_CHECK: where the flag is accepted */
    const char *metavar; /* what the value looks like in --help ("" for switches) */
    const char *help;    /* NULL: an alias, left out of --help */
} flag_spec;

#define FIELD(f) offsetof(cli_config, f)
#define BOTH (CLI_BENCH | CLI_CHECK)

/* FLAG_INT writes an int64_t field, or an int for the fields int_field() lists. */
static const flag_spec flags[] = {
    {"--batch", FLAG_INT, FIELD(batch), 1, BOTH, "N", "batch size (default 2; decode 8)"},
    {"--seqlen", FLAG_INT, FIELD(seqlen_q), 0, BOTH, "N", "query and key length (default 1024)"},
    {"--seqlen-q", FLAG_INT, FIELD(seqlen_q), 0, BOTH, "N", "query length (decode default 1)"},
    {"--seqlen-k", FLAG_INT, FIELD(seqlen_k), 0, BOTH, "N", "key length (default: the query length)"},
    {"--heads", FLAG_INT, FIELD(heads), 1, BOTH, "N", "query heads (default 16; decode 32)"},
    {"--kv-heads", FLAG_INT, FIELD(kv_heads), 1, BOTH, "N", "key/value heads, divides --heads (default: --heads; decode 8)"},
    {"--head-dim", FLAG_INT, FIELD(head_dim), 1, BOTH, "N", "head dimension of q and k, 1..256 (default 64; decode 128)"},
    {"--head-dim-v", FLAG_INT, FIELD(head_dim_v), 1, BOTH, "N", "head dimension of v and out (default: --head-dim)"},
    {"--dtype", FLAG_DTYPE, FIELD(dtype), 0, BOTH, "T", "f32 | f16 | bf16 | e4m3 (default bf16; e4m3: forward only, bf16 out)"},
    {"--causal", FLAG_SWITCH, FIELD(causal), 1, BOTH, "", "causal mask (the default unless --window is given)"},
    {"--no-causal", FLAG_SWITCH, FIELD(causal), 0, BOTH, "", "no causal mask"},
    {"--top-left", FLAG_SWITCH, FIELD(top_left), 1, BOTH, "", "align masks and ALiBi to the top-left corner (default bottom-right)"},
    {"--window", FLAG_WINDOW, FIELD(window_left), 0, BOTH, "L,R", "sliding window, -1 unbounded (replaces the default causal mask)"},
    {"--softcap", FLAG_FLOAT, FIELD(softcap), 0, BOTH, "C", "s = C * tanh(s / C)"},
    {"--alibi", FLAG_SWITCH, FIELD(alibi), 1, BOTH, "", "ALiBi with slopes 2^(-8(h+1)/heads)"},
    {"--dropout", FLAG_FLOAT, FIELD(dropout_p), 1, BOTH, "P", "dropout probability in [0, 1)"},
    {"--seed", FLAG_U64, FIELD(seed), 0, BOTH, "S", "seed of the random inputs and of dropout (default 42)"},
    {"--scale", FLAG_FLOAT, FIELD(scale), 0, BOTH, "S", "softmax scale (default 1/sqrt(head dim))"},
    {"--deterministic", FLAG_SWITCH, FIELD(deterministic), 1, BOTH, "", "bitwise reproducible backward"},
    {"--descale", FLAG_SWITCH, FIELD(descale), 1, BOTH, "", "e4m3: random per-(batch, kv head) descales in [0.5, 2) for q, k, v (default 1)"},
    {"--varlen", FLAG_SWITCH, FIELD(varlen), 1, BOTH, "", "the batch as packed sequences (fa_varlen_fwd / fa_varlen_bwd)"},
    {"--decode", FLAG_SWITCH, FIELD(kvcache), 1, BOTH, "", "KV-cache decoding (fa_fwd_kvcache), forward only"},
    {"--kvcache", FLAG_SWITCH, FIELD(kvcache), 1, BOTH, "", NULL},
    {"--cache-len", FLAG_INT, FIELD(cache_len), 0, BOTH, "N", "keys already in the cache (default: --seqlen-k, else 4096)"},
    {"--new", FLAG_INT, FIELD(new_keys), 0, BOTH, "N", "keys appended to the cache by the call (default 0)"},
    {"--block-size", FLAG_INT, FIELD(block_size), 0, BOTH, "N", "paged cache with this block size (default 0: contiguous)"},
    {"--splits", FLAG_INT, FIELD(splits), 0, BOTH, "N", "split-KV chunks (default 0: the library chooses)"},
    {"--backend", FLAG_BACKEND, FIELD(backend), 0, BOTH, "B", "cpu | cuda | cuda_sm80 | reference (default: cuda if a GPU is there, else cpu)"},
    {"--against", FLAG_BACKEND, FIELD(against), 0, CLI_CHECK, "B", "also run backend B and compare the two"},
    {"--threads", FLAG_INT, FIELD(threads), 0, BOTH, "N", "CPU threads (default 0: every core)"},
    {"--repeat", FLAG_INT, FIELD(repeat), 1, CLI_BENCH, "N", "timed runs, the median is reported (default 10)"},
    {"--warmup", FLAG_INT, FIELD(warmup), 0, CLI_BENCH, "N", "untimed runs first (default 2)"},
    {"--fwd-only", FLAG_SWITCH, FIELD(fwd_only), 1, BOTH, "", "skip the backward"},
    {"--check", FLAG_SWITCH, FIELD(check), 1, CLI_BENCH, "", NULL},
    {"--no-check", FLAG_SWITCH, FIELD(check), 0, CLI_BENCH, "", "skip the comparison with the float64 reference"},
    {"--grid", FLAG_SWITCH, FIELD(grid), 1, CLI_BENCH, "", "the standard GPU grid: hidden 2048, head dim 64/128/256, (batch, seqlen) (32,512)..(1,16k), causal and not"},
    {"--json", FLAG_SWITCH, FIELD(json), 1, BOTH, "", "one JSON object per case per line instead of a table"},
};

/* Integer fields stored as int rather than int64_t. */
static int int_field(size_t offset) {
    return offset == FIELD(splits) || offset == FIELD(threads) || offset == FIELD(repeat) ||
           offset == FIELD(warmup);
}

static const char *command_name(cli_command cmd) { return cmd == CLI_BENCH ? "bench" : "check"; }

int cli_parse_backend(const char *s, fa_backend *b) {
    static const struct { const char *name; fa_backend b; } names[] = {
        {"auto", FA_BACKEND_AUTO}, {"reference", FA_BACKEND_REFERENCE}, {"ref", FA_BACKEND_REFERENCE},
        {"cpu", FA_BACKEND_CPU}, {"cuda", FA_BACKEND_CUDA}, {"cuda_sm80", FA_BACKEND_CUDA_SM80},
        {"sm80", FA_BACKEND_CUDA_SM80},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        if (strcmp(s, names[i].name) == 0) {
            *b = names[i].b;
            return 1;
        }
    }
    return 0;
}

static int parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return 0;
    *out = (int64_t)v;
    return 1;
}

static int parse_value(cli_command cmd, const flag_spec *f, const char *v, cli_config *c) {
    char *field = (char *)c + f->offset;
    const char *prog = command_name(cmd);
    switch (f->kind) {
    case FLAG_SWITCH:
        return 1;
    case FLAG_INT: {
        int64_t x;
        if (!parse_i64(v, &x) || x < f->min || x > INT32_MAX) {
            fprintf(stderr, "flashattn %s: %s expects an integer >= %lld, got '%s'\n", prog, f->name,
                    (long long)f->min, v);
            return 0;
        }
        if (int_field(f->offset)) *(int *)field = (int)x;
        else *(int64_t *)field = x;
        return 1;
    }
    case FLAG_FLOAT: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        /* Dropout must stay below 1; other floats only need to be finite and >= 0. */
        int ok = !errno && end != v && !*end && isfinite(x) && x >= 0 && (f->min == 0 || x < 1);
        if (!ok) {
            fprintf(stderr, "flashattn %s: %s expects a number %s, got '%s'\n", prog, f->name,
                    f->min ? "in [0, 1)" : ">= 0", v);
            return 0;
        }
        *(float *)field = (float)x;
        return 1;
    }
    case FLAG_U64: {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 0);
        if (errno || end == v || *end || v[0] == '-') {
            fprintf(stderr, "flashattn %s: %s expects an unsigned integer, got '%s'\n", prog, f->name, v);
            return 0;
        }
        *(uint64_t *)field = (uint64_t)x;
        return 1;
    }
    case FLAG_DTYPE:
        if (strcmp(v, "f32") == 0 || strcmp(v, "float32") == 0) c->dtype = FA_F32;
        else if (strcmp(v, "f16") == 0 || strcmp(v, "float16") == 0) c->dtype = FA_F16;
        else if (strcmp(v, "bf16") == 0 || strcmp(v, "bfloat16") == 0) c->dtype = FA_BF16;
        else if (strcmp(v, "e4m3") == 0 || strcmp(v, "float8_e4m3") == 0 || strcmp(v, "float8_e4m3fn") == 0)
            c->dtype = FA_F8_E4M3;
        else {
            fprintf(stderr, "flashattn %s: --dtype expects f32, f16, bf16 or e4m3, got '%s'\n", prog, v);
            return 0;
        }
        return 1;
    case FLAG_WINDOW: {
        char buf[64];
        const char *comma = strchr(v, ',');
        int64_t l, r;
        size_t n = comma ? (size_t)(comma - v) : 0;
        int ok = comma && n < sizeof buf;
        if (ok) {
            memcpy(buf, v, n);
            buf[n] = 0;
            ok = parse_i64(buf, &l) && parse_i64(comma + 1, &r) && l >= -1 && r >= -1;
        }
        if (!ok) {
            fprintf(stderr, "flashattn %s: --window expects L,R with each -1 or more, got '%s'\n", prog, v);
            return 0;
        }
        c->use_window = 1;
        c->window_left = l;
        c->window_right = r;
        return 1;
    }
    case FLAG_BACKEND: {
        fa_backend b;
        if (!cli_parse_backend(v, &b)) {
            fprintf(stderr, "flashattn %s: %s expects cpu, cuda, cuda_sm80 or reference, got '%s'\n", prog,
                    f->name, v);
            return 0;
        }
        *(fa_backend *)field = b;
        if (f->offset == FIELD(against)) c->has_against = 1;
        return 1;
    }
    }
    return 0;
}

cli_parse_result cli_parse_args(cli_command cmd, int argc, char **argv, cli_config *c) {
    cli_config_defaults(c);
    if (cmd == CLI_CHECK) c->repeat = c->warmup = 0; /* check runs each direction once */
    for (int i = 0; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            cli_print_usage(cmd, stdout);
            return CLI_HELP_SHOWN;
        }
        /* --flag=value or --flag value */
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const flag_spec *f = NULL;
        for (size_t k = 0; k < sizeof flags / sizeof flags[0]; ++k) {
            if (strlen(flags[k].name) == name_len && strncmp(flags[k].name, arg, name_len) == 0) {
                f = &flags[k];
                break;
            }
        }
        if (!f) {
            fprintf(stderr, "flashattn %s: unknown flag '%.*s' (see flashattn %s --help)\n", command_name(cmd),
                    (int)name_len, arg, command_name(cmd));
            return CLI_BAD_FLAG;
        }
        if (!(f->commands & (int)cmd)) {
            fprintf(stderr, "flashattn %s: %s is a flag of flashattn %s only\n", command_name(cmd), f->name,
                    command_name(cmd == CLI_BENCH ? CLI_CHECK : CLI_BENCH));
            return CLI_BAD_FLAG;
        }
        if (f->kind == FLAG_SWITCH) {
            if (eq) {
                fprintf(stderr, "flashattn %s: %s takes no value\n", command_name(cmd), f->name);
                return CLI_BAD_FLAG;
            }
            *(int *)((char *)c + f->offset) = (int)f->min;
            continue;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value) {
            fprintf(stderr, "flashattn %s: %s needs a value\n", command_name(cmd), f->name);
            return CLI_BAD_FLAG;
        }
        if (!parse_value(cmd, f, value, c)) return CLI_BAD_FLAG;
        if (f->offset == FIELD(seqlen_q) && strcmp(f->name, "--seqlen") == 0) c->seqlen_k = c->seqlen_q;
    }
    if (c->kvcache && c->dropout_p > 0) {
        fprintf(stderr, "flashattn %s: --dropout cannot be combined with --decode (KV-cache calls have no dropout)\n",
                command_name(cmd));
        return CLI_BAD_FLAG;
    }
    if (c->kvcache && c->varlen) {
        fprintf(stderr, "flashattn %s: --varlen cannot be combined with --decode\n", command_name(cmd));
        return CLI_BAD_FLAG;
    }
    if (c->dtype == FA_F8_E4M3) {
        /* float8 inputs: the plain or packed forward only (the library has no float8
         * KV cache, dropout or backward). */
        const char *clash = c->kvcache ? "--decode" : c->dropout_p > 0 ? "--dropout" : NULL;
        if (clash) {
            fprintf(stderr, "flashattn %s: %s cannot be combined with --dtype e4m3 (%s)\n", command_name(cmd), clash,
                    c->kvcache ? "no backend has a float8 KV cache" : "float8 inputs take no dropout");
            return CLI_BAD_FLAG;
        }
        if (c->deterministic) { /* the only flag that asks for the backward by name */
            fprintf(stderr, "flashattn %s: --deterministic asks for a reproducible backward, but --dtype e4m3 runs "
                            "the forward only (float8 inputs have no backward)\n", command_name(cmd));
            return CLI_BAD_FLAG;
        }
    } else if (c->descale) {
        fprintf(stderr, "flashattn %s: --descale needs --dtype e4m3 (descale factors apply to float8 inputs only)\n",
                command_name(cmd));
        return CLI_BAD_FLAG;
    }
    /* The KV-cache call has no backward, and neither have float8 inputs. */
    if (c->kvcache || c->dtype == FA_F8_E4M3) c->fwd_only = 1;
    if (cmd == CLI_CHECK) c->check = c->thorough_check = 1;
    cli_config_resolve(c);
    if (c->heads % c->kv_heads != 0) {
        fprintf(stderr, "flashattn %s: --heads (%lld) must be a multiple of --kv-heads (%lld)\n", command_name(cmd),
                (long long)c->heads, (long long)c->kv_heads);
        return CLI_BAD_FLAG;
    }
    return CLI_PARSED;
}

void cli_print_usage(cli_command cmd, FILE *f) {
    if (cmd == CLI_BENCH) {
        fprintf(f,
                "usage: flashattn bench [flags]\n\n"
                "Times the forward and backward on the best backend present (CUDA if a device\n"
                "is there, else the CPU), checks both against the float64 reference and prints\n"
                "time, GFLOP/s (TFLOP/s on a GPU), the fraction of the CPU's measured peak, the\n"
                "max error and pass/fail. With no flags: batch 2, 16 heads, seqlen 1024, head\n"
                "dim 64, causal, bf16. Exit status 1 if a check fails or a call errs.\n\n");
    } else {
        fprintf(f,
                "usage: flashattn check [flags]\n\n"
                "Runs the forward and backward once and compares them with the float64\n"
                "reference (and with a second backend given by --against); prints max errors.\n"
                "Exit status 1 if a check fails or a call errs.\n\n");
    }
    fprintf(f, "flags:\n");
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; ++k) {
        if (!flags[k].help || !(flags[k].commands & (int)cmd)) continue;
        char left[40];
        snprintf(left, sizeof left, "%s %s", flags[k].name, flags[k].metavar);
        fprintf(f, "  %-18s %s\n", left, flags[k].help);
    }
    fprintf(f, "  %-18s %s\n\n", "--help", "this text");
    fprintf(f,
               "Errors against the reference: float32 passes with max |err| <= 1e-4 * max(1, max |ref|);\n"
               "float16/bfloat16 pass when max |err| is at most 2x (outputs) or 3x (gradients)\n"
               "the error of a naive attention computed in the same storage precision, plus half\n"
               "the dtype's unit roundoff. float8 e4m3 (forward only, bf16 out): out within 2x the\n"
               "error of a naive e4m3 attention (float32 scores, P rounded to e4m3, bf16 out) plus\n"
               "half bf16's unit roundoff; each lse within 2x the naive lse error plus\n"
               "2^-12 * max(1, D/128) * scale * sum_d |q_d k_d| (the largest over the row's\n"
               "keys) + 1e-4.\n"
               "No output may be left unwritten (outputs are poisoned with NaN first). Big\n"
               "problems are checked on a slice (batch 0, the first heads, for very long\n"
               "forwards a block of query rows) and the output says so.\n");
}
