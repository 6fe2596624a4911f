/* The fused CPU kernel of the LapPE DeepSet (GraphGPS; LapPEEncoder with num_layers = 2 and ReLU), float32.
 *
 * Compiled by gea_graph/nn/pe_encoders.py with -DH1=<hidden width> -DP=<output width> -DV1=<lanes >= H1>
 * -DVP=<lanes >= P> (powers of two): every row is a GCC vector of V1 (or VP) floats, padded with zeros.
 *
 * For node n and eigenpair j with input (a, l) = raw[n][j] and weight m = valid[n][j]:
 * forward:  h1 = relu(W1 [a, l] + b1), h2 = relu(W2 h1 + b2), out[n] = sum_j m h2.
 * backward: for the incoming gradient G of out, g2 = m G[n] * [W2 h1 + b2 > 0], g1 = (W2^T g2) * [h1 > 0],
 *           dW2 = sum g2 h1^T, db2 = sum g2, dW1 = sum g1 [a, l]^T, db1 = sum g1 (no gradient for raw).
 * The N k pairs are taken TILE at a time, their products interleaved (TILE independent chains of vector
 * multiply-adds, not one). h1 and h2 are recomputed in the backward (cheaper than reading them back: [N k, H1]
 * floats would go through memory twice).
 */
#include <stdint.h>
#include <string.h>

typedef float v1_t __attribute__((vector_size(V1 * sizeof(float)), aligned(4)));
typedef float vp_t __attribute__((vector_size(VP * sizeof(float)), aligned(4)));
typedef int32_t v1i_t __attribute__((vector_size(V1 * sizeof(float)), aligned(4)));
typedef int32_t vpi_t __attribute__((vector_size(VP * sizeof(float)), aligned(4)));

static const v1_t ZERO_1 = {0};
static const vp_t ZERO_P = {0};

/* weight gradients: float block sums of BLOCK nodes, the blocks in double (as the GEA kernel) */
#include "block_sums.h"

/* v where cond > 0, else 0 (C has no vector ?:) */
static inline v1_t where_positive1(v1_t cond, v1_t v) { return (v1_t)((v1i_t)v & (cond > ZERO_1)); }
static inline vp_t where_positivep(vp_t cond, vp_t v) { return (vp_t)((vpi_t)v & (cond > ZERO_P)); }

#define TILE 4

/* The layers of the pairs i0 .. i0 + TILE - 1 (those past NK get a = l = 0): h1 into h (as floats) and the
 * pre-activations W2 h1 + b2 into pre. */
static inline void layers(int64_t i0, int64_t NK, const float *restrict raw, const v1_t *restrict w1,
                          const vp_t *restrict w2t, vp_t b2, float h[TILE][V1], vp_t pre[TILE]) {
    for (int u = 0; u < TILE; ++u) {
        int64_t i = i0 + u;
        float a = i < NK ? raw[2 * i] : 0.0f, l = i < NK ? raw[2 * i + 1] : 0.0f;
        v1_t pre1 = w1[0] * a + w1[1] * l + w1[2], h1 = where_positive1(pre1, pre1);
        memcpy(h[u], &h1, sizeof h1);
        pre[u] = b2;
    }
    for (int m = 0; m < H1; ++m) {
        vp_t w = w2t[m];
        for (int u = 0; u < TILE; ++u) pre[u] += h[u][m] * w;
    }
}

static inline void add_row(float *restrict dst, vp_t v) {
    vp_t row;
    memcpy(&row, dst, P * sizeof(float));
    row += v;
    memcpy(dst, &row, P * sizeof(float));
}

/* w1 [3][V1]: the columns of W1 for a and l, then b1; w2t [H1][VP]: W2^T; b2 [VP]. out [N][P]. */
void lap_deepset_forward(int64_t N, int64_t K, const float *restrict raw /* [N][K][2] */,
                         const float *restrict valid /* [N][K] */, const float *restrict w1_in,
                         const float *restrict w2t_in, const float *restrict b2_in, float *restrict out) {
    v1_t w1[3];
    vp_t w2t[H1], b2;
    memcpy(w1, w1_in, sizeof w1);
    memcpy(w2t, w2t_in, sizeof w2t);
    memcpy(&b2, b2_in, sizeof b2);
    memset(out, 0, N * P * sizeof(float));
    const int64_t NK = N * K;
    for (int64_t i0 = 0; i0 < NK; i0 += TILE) {
        float h[TILE][V1];
        vp_t pre[TILE];
        layers(i0, NK, raw, w1, w2t, b2, h, pre);
        for (int u = 0; u < TILE && i0 + u < NK; ++u) {
            float m = valid[i0 + u];
            if (m != 0.0f) add_row(out + (i0 + u) / K * P, m * where_positivep(pre[u], pre[u]));
        }
    }
}

/* w2 [P][V1]: W2 (rows); grad [N][P]. Writes gw1 [3][V1] (dW1 columns for a and l, db1), gw2t [H1][VP] (dW2^T)
 * and gb2 [VP]. */
void lap_deepset_backward(int64_t N, int64_t K, const float *restrict raw, const float *restrict valid,
                          const float *restrict w1_in, const float *restrict w2t_in, const float *restrict b2_in,
                          const float *restrict w2_in, const float *restrict grad, float *restrict gw1_out,
                          float *restrict gw2t_out, float *restrict gb2_out) {
    v1_t w1[3], w2[P];
    vp_t w2t[H1], b2;
    memcpy(w1, w1_in, sizeof w1);
    memcpy(w2t, w2t_in, sizeof w2t);
    memcpy(&b2, b2_in, sizeof b2);
    memcpy(w2, w2_in, sizeof w2);
    /* block sums: gw1 (3 V1), gb2 (VP), gw2t (H1 VP), in one struct so that one flush covers them */
    struct { v1_t gw1[3]; vp_t gb2; vp_t gw2t[H1]; } part;
    const int64_t count = sizeof part / sizeof(float);
    double total[sizeof part / sizeof(float)];
    memset(&part, 0, sizeof part);
    memset(total, 0, sizeof total);
    const int64_t NK = N * K, pairs_per_block = BLOCK * K;
    for (int64_t i0 = 0; i0 < NK; i0 += TILE) {
        float h[TILE][V1], gp[TILE][VP];
        vp_t pre[TILE], g2s[TILE];
        layers(i0, NK, raw, w1, w2t, b2, h, pre);
        for (int u = 0; u < TILE; ++u) {
            int64_t i = i0 + u;
            vp_t g = ZERO_P;
            float m = i < NK ? valid[i] : 0.0f;
            if (m != 0.0f) memcpy(&g, grad + i / K * P, P * sizeof(float));
            vp_t g2 = where_positivep(pre[u], m * g);
            part.gb2 += g2;
            g2s[u] = g2;
            memcpy(gp[u], &g2, sizeof g2);
        }
        for (int k = 0; k < H1; ++k) {
            vp_t acc = part.gw2t[k];
            for (int u = 0; u < TILE; ++u) acc += h[u][k] * g2s[u];
            part.gw2t[k] = acc;
        }
        v1_t g1[TILE];
        for (int u = 0; u < TILE; ++u) g1[u] = ZERO_1;
        for (int p = 0; p < P; ++p)
            for (int u = 0; u < TILE; ++u) g1[u] += gp[u][p] * w2[p];
        for (int u = 0; u < TILE; ++u) {
            int64_t i = i0 + u;
            v1_t h1;
            memcpy(&h1, h[u], sizeof h1);
            v1_t g = where_positive1(h1, g1[u]);
            float a = i < NK ? raw[2 * i] : 0.0f, l = i < NK ? raw[2 * i + 1] : 0.0f;
            part.gw1[0] += g * a;
            part.gw1[1] += g * l;
            part.gw1[2] += g;
        }
        /* a block: about BLOCK nodes' pairs */
        if ((i0 / TILE + 1) % ((pairs_per_block + TILE - 1) / TILE) == 0) flush(total, &part, count);
    }
    flush(total, &part, count);
    float result[sizeof part / sizeof(float)];
    store_totals(result, total, count);
    memcpy(&part, result, sizeof part);
    memcpy(gw1_out, part.gw1, sizeof part.gw1);
    memcpy(gb2_out, &part.gb2, sizeof part.gb2);
    memcpy(gw2t_out, part.gw2t, sizeof part.gw2t);
}
