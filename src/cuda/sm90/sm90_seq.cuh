/*
 * Hopper kernels, both directions: one sequence of a batched or varlen
 * (packed) problem, its lengths, where its rows start in the tensor maps
 * and where its causal diagonal lies.
 */
#ifndef FA_SM90_SEQ_CUH
#define FA_SM90_SEQ_CUH

struct Sm90Seq {
    int seq_q, seq_k;   /* this sequence's lengths */
    int q_row0, k_row0; /* its first row in the maps' row dimension (0 when batched) */
    int map_b;          /* its coordinate in the maps' batch dimension (0 for varlen) */
    int diag;           /* key j is on query i's diagonal when j == i + diag */
};

/* Sequence b of a launch's problem (Params: the forward's or the backward's,
 * with cu_seqlens_q/k, sq, sk and top_left): varlen, from cu_seqlens (the
 * maps then span the packed rows as one batch); else of lengths sq and sk,
 * batch coordinate b. top_left: the diagonal starts at key 0, else it ends
 * at the last key. */
/* A read of read-only memory (host builds: a plain one). */
__host__ __device__ __forceinline__ int sm90_ldg(const int *x) {
#ifdef __CUDA_ARCH__
    return __ldg(x);
#else
    return *x;
#endif
}

template <class Params>
__host__ __device__ __forceinline__ Sm90Seq sm90_seq(const Params &p, bool varlen, int b) {
    Sm90Seq s;
    if (varlen) {
        s.q_row0 = sm90_ldg(&p.cu_seqlens_q[b]);
        s.k_row0 = sm90_ldg(&p.cu_seqlens_k[b]);
        s.seq_q = sm90_ldg(&p.cu_seqlens_q[b + 1]) - s.q_row0;
        s.seq_k = sm90_ldg(&p.cu_seqlens_k[b + 1]) - s.k_row0;
        s.map_b = 0;
    } else {
        s.q_row0 = s.k_row0 = 0;
        s.seq_q = p.sq;
        s.seq_k = p.sk;
        s.map_b = b;
    }
    s.diag = p.top_left ? 0 : s.seq_k - s.seq_q;
    return s;
}

#endif /* FA_SM90_SEQ_CUH */
