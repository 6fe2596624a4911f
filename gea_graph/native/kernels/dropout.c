/* Dropout on CPU, float32: keep masks from the counter-based generator Philox4x32-10 (Salmon et al., SC 2011, the
 * generator of PyTorch's CUDA dropout), so that the backward draws the forward's mask again from (seed, element
 * index) and no mask is stored.
 *
 * The elements go in chunks of 64: element 64 c + 16 j + l takes word j of the Philox block with counter
 * (16 c + l, 0, 0, 0) under the key (k0, k1), so that a vector of 16 consecutive elements reads one word of 16
 * blocks. It is dropped when that word is below `threshold` (P(drop) = threshold / 2^32); a kept element is
 * multiplied by `scale`.
 *
 * dropout_forward:  out = residual + keep * scale * x (no residual: residual = 0).
 * dropout_backward: grad_x = keep * scale * grad.
 *
 * Sixteen blocks (64 elements) are drawn at a time, one block per vector lane.
 */
#include <stdint.h>
#include <string.h>

#define LANES 16
typedef uint32_t vu_t __attribute__((vector_size(LANES * 4)));
typedef uint64_t vw_t __attribute__((vector_size(LANES * 4)));  /* the same bytes as LANES / 2 64-bit lanes */
typedef float vf_t __attribute__((vector_size(LANES * 4), aligned(4)));
typedef int32_t vi_t __attribute__((vector_size(LANES * 4)));

#define CHUNK (4 * LANES)

/* The high 32 bits of a * m for each 32-bit lane: even lanes from the 64-bit products of the even lanes, odd lanes
 * from those of the odd ones. */
static inline vu_t mulhi(vu_t a, uint64_t m) {
    vw_t w = (vw_t)a;
    vw_t even = (w & 0xffffffffu) * m, odd = (w >> 32) * m;
    return (vu_t)((even >> 32) | (odd & 0xffffffff00000000u));
}

/* Words [4][LANES] of the blocks first .. first + LANES - 1 (word w of block first + l at [w][l]). */
static inline void philox(uint64_t first, uint32_t k0, uint32_t k1, vu_t words[4]) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    vu_t c0, c1, c2 = {0}, c3 = {0};
    for (int l = 0; l < LANES; ++l) {
        c0[l] = (uint32_t)(first + l);
        c1[l] = (uint32_t)((first + l) >> 32);
    }
    for (int r = 0; r < 10; ++r) {
        vu_t hi0 = mulhi(c0, M0), lo0 = c0 * M0, hi1 = mulhi(c2, M1), lo1 = c2 * M1;
        vu_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        k0 += W0;
        k1 += W1;
    }
    words[0] = c0; words[1] = c1; words[2] = c2; words[3] = c3;
}

/* The factors (scale or 0) of the 64 elements of chunk c, in element order. */
static inline void factors(int64_t c, uint32_t k0, uint32_t k1, uint32_t threshold, float scale, vf_t f[4]) {
    vu_t words[4];
    philox((uint64_t)c * LANES, k0, k1, words);
    const vf_t s = {0};
    for (int j = 0; j < 4; ++j) f[j] = (vf_t)((vi_t)(words[j] >= threshold) & (vi_t)(s + scale));
}

void dropout_forward(int64_t n, const float *restrict x, const float *restrict residual, float *restrict out,
                     uint32_t k0, uint32_t k1, uint32_t threshold, float scale) {
    int64_t full = n / CHUNK;
    for (int64_t c = 0; c < full; ++c) {
        vf_t f[4];
        factors(c, k0, k1, threshold, scale, f);
        for (int j = 0; j < 4; ++j) {
            int64_t at = c * CHUNK + j * LANES;
            vf_t v;
            memcpy(&v, x + at, sizeof v);
            v *= f[j];
            if (residual) {
                vf_t r;
                memcpy(&r, residual + at, sizeof r);
                v += r;
            }
            memcpy(out + at, &v, sizeof v);
        }
    }
    if (full * CHUNK < n) { /* the last, partial chunk */
        vf_t f[4];
        factors(full, k0, k1, threshold, scale, f);
        float g[CHUNK];
        memcpy(g, f, sizeof g);
        for (int64_t i = full * CHUNK; i < n; ++i)
            out[i] = residual ? residual[i] + g[i - full * CHUNK] * x[i] : g[i - full * CHUNK] * x[i];
    }
}

void dropout_backward(int64_t n, const float *restrict grad, float *restrict grad_x, uint32_t k0, uint32_t k1,
                      uint32_t threshold, float scale) {
    dropout_forward(n, grad, 0, grad_x, k0, k1, threshold, scale);
}
