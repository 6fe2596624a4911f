/* The fused CPU kernel of GEA's external units (Eqs. 3-4 of GEAET, one head split), float32.
 *
 * Compiled by gea_graph/nn/native.py with -DD=<head channels> -DS=<units> -DH=<heads> -DVD=<lanes >= D>
 * -DVS=<lanes >= S> (VD, VS powers of two): every row is a GCC vector of VS (or VD) floats, padded with zeros.
 * Rows are node-head pairs: row n * H + h is head h of node n. Groups are graphs (index[n], or one group).
 *
 * forward:  a = x Wk^T, p = softmax of a over each group's rows (per head and unit, shifted by the group's
 *           maximum), rho = eps + sum_s p, alpha = p / rho, out = alpha Wv^T + bv.
 * backward: for the incoming gradient G of out, with Ga = G Wv:
 *           s = alpha * (Ga - <Ga, alpha>), ga = s - p * sum_group(s),
 *           dWv = G^T alpha, dbv = sum G, dWk = ga^T x, dx = ga Wk.
 */
#include <stdint.h>
#include <string.h>

typedef float vs_t __attribute__((vector_size(VS * sizeof(float))));
typedef float vd_t __attribute__((vector_size(VD * sizeof(float))));
typedef int32_t vsi_t __attribute__((vector_size(VS * sizeof(float))));

static const vs_t ZERO_S = {0}; /* ZERO_S + c broadcasts c */

/* Loads and stores of the first n floats of a vector (the rest loads as zero). */
#define LOAD(v, src, n) do { memset(&(v), 0, sizeof(v)); memcpy(&(v), (src), (n) * sizeof(float)); } while (0)
#define STORE(dst, v, n) memcpy((dst), &(v), (n) * sizeof(float))

static inline vs_t vmax(vs_t a, vs_t b) {
    vsi_t m = a > b;
    return (vs_t)((m & (vsi_t)a) | (~m & (vsi_t)b));
}

static inline float hsum(vs_t v) {
    float t = 0.0f;
    for (int i = 0; i < VS; ++i) t += v[i];
    return t;
}

/* e^x for x <= 0 (Cephes' expf: x = n ln 2 + r, |r| <= ln 2 / 2, a degree-6 polynomial times 2^n), within
 * 2 ulp of expf; 0 below -87.33 (where expf is subnormal). */
static inline vs_t exp_nonpositive(vs_t x) {
    const float lo = -87.3365447504f;
    vsi_t under = x < lo;
    vs_t xc = (vs_t)((under & (vsi_t)(ZERO_S + lo)) | (~under & (vsi_t)x));
    const vs_t magic = ZERO_S + 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    vs_t fx = (xc * 1.44269504088896341f + magic) - magic;
    vs_t r = xc - fx * 0.693359375f + fx * 2.12194440e-4f;
    vs_t y = r * 1.9875691500e-4f + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    vsi_t bits = (__builtin_convertvector(fx, vsi_t) + 127) << 23;
    return (vs_t)((vsi_t)(y * (vs_t)bits) & ~under);
}

#define GROUP(index, n) ((index) ? (index)[n] : 0)

void gea_forward(int64_t N, int64_t G, const float *restrict x, const int64_t *restrict index,
                 const float *restrict wkt /* [D][VS] */, const float *restrict wvt /* [S][VD] */,
                 const float *restrict bv /* [VD] or NULL */, float eps, float *restrict p /* [N H][S] */,
                 float *restrict alpha /* [N H][S] */, float *restrict out /* [N H][D] */,
                 float *restrict work /* [2][G H][VS] */) {
    vs_t wk[D];
    vd_t wv[S], b;
    for (int d = 0; d < D; ++d) memcpy(&wk[d], wkt + d * VS, sizeof(vs_t));
    for (int s = 0; s < S; ++s) memcpy(&wv[s], wvt + s * VD, sizeof(vd_t));
    if (bv) memcpy(&b, bv, sizeof b); else memset(&b, 0, sizeof b);
    vs_t *restrict mx = (vs_t *)work, *restrict z = mx + G * H;
    for (int64_t i = 0; i < G * H; ++i) { mx[i] = ZERO_S - 3.40282347e38f; z[i] = ZERO_S; }
    for (int64_t n = 0; n < N; ++n) { /* logits and their per-group maxima */
        const float *xn = x + n * H * D;
        vs_t *m = mx + GROUP(index, n) * H;
        vs_t a[H];
        for (int h = 0; h < H; ++h) a[h] = ZERO_S;
        for (int d = 0; d < D; ++d)
            for (int h = 0; h < H; ++h) a[h] += xn[h * D + d] * wk[d];
        for (int h = 0; h < H; ++h) { m[h] = vmax(m[h], a[h]); STORE(p + (n * H + h) * S, a[h], S); }
    }
    for (int64_t n = 0; n < N; ++n) { /* shifted exponentials and their group sums */
        int64_t g = GROUP(index, n) * H;
        for (int h = 0; h < H; ++h) {
            vs_t a;
            LOAD(a, p + (n * H + h) * S, S);
            vs_t e = exp_nonpositive(a - mx[g + h]);
            z[g + h] += e;
            STORE(p + (n * H + h) * S, e, S);
        }
    }
    for (int64_t i = 0; i < G * H; ++i) z[i] = 1.0f / z[i];
    for (int64_t n = 0; n < N; ++n) { /* softmax, L1 step, value unit */
        int64_t g = GROUP(index, n) * H;
        for (int h = 0; h < H; ++h) {
            int64_t row = n * H + h;
            vs_t q;
            LOAD(q, p + row * S, S); /* padded lanes load as 0 and stay 0 */
            q *= z[g + h];
            STORE(p + row * S, q, S);
            q *= 1.0f / (hsum(q) + eps);
            STORE(alpha + row * S, q, S);
            vd_t o = b;
            for (int s = 0; s < S; ++s) o += q[s] * wv[s];
            STORE(out + row * D, o, D);
        }
    }
}

void gea_backward(int64_t N, int64_t G, const float *restrict x, const int64_t *restrict index,
                  const float *restrict wkp /* [S][VD] */, const float *restrict wvp /* [D][VS] */,
                  const float *restrict p, const float *restrict alpha, const float *restrict grad /* [N H][D] */,
                  float *restrict gx /* [N H][D] or NULL */, float *restrict gwkt /* [D][VS] */,
                  float *restrict gwv /* [D][VS] */, float *restrict gbv /* [VD] */,
                  float *restrict sbuf /* [N H][VS] */, float *restrict work /* [G H][VS] */) {
    vs_t wv[D], accv[D], acck[D];
    vd_t wk[S], accb;
    for (int d = 0; d < D; ++d) memcpy(&wv[d], wvp + d * VS, sizeof(vs_t));
    for (int s = 0; s < S; ++s) memcpy(&wk[s], wkp + s * VD, sizeof(vd_t));
    memset(accv, 0, sizeof accv);
    memset(acck, 0, sizeof acck);
    memset(&accb, 0, sizeof accb);
    vs_t *restrict t = (vs_t *)work, *restrict sv = (vs_t *)sbuf;
    memset(t, 0, G * H * sizeof(vs_t));
    for (int64_t n = 0; n < N; ++n) { /* s = alpha (Ga - <Ga, alpha>), its group sums, dWv, dbv */
        int64_t g = GROUP(index, n) * H;
        vd_t gr[H];
        vs_t al[H], ga[H];
        for (int h = 0; h < H; ++h) {
            LOAD(gr[h], grad + (n * H + h) * D, D);
            LOAD(al[h], alpha + (n * H + h) * S, S);
            accb += gr[h];
            ga[h] = ZERO_S;
        }
        for (int d = 0; d < D; ++d) {
            vs_t acc = accv[d];
            for (int h = 0; h < H; ++h) { ga[h] += gr[h][d] * wv[d]; acc += gr[h][d] * al[h]; }
            accv[d] = acc;
        }
        for (int h = 0; h < H; ++h) {
            vs_t s = al[h] * (ga[h] - hsum(ga[h] * al[h]));
            t[g + h] += s;
            sv[n * H + h] = s;
        }
    }
    for (int64_t n = 0; n < N; ++n) { /* ga = s - p sum_group(s), dWk, dx */
        int64_t g = GROUP(index, n) * H;
        vs_t ga[H];
        for (int h = 0; h < H; ++h) {
            vs_t q;
            LOAD(q, p + (n * H + h) * S, S);
            ga[h] = sv[n * H + h] - q * t[g + h];
        }
        const float *xn = x + n * H * D;
        for (int d = 0; d < D; ++d) {
            vs_t acc = acck[d];
            for (int h = 0; h < H; ++h) acc += xn[h * D + d] * ga[h];
            acck[d] = acc;
        }
        if (gx) {
            for (int h = 0; h < H; ++h) {
                vd_t o = wk[0] * ga[h][0];
                for (int s = 1; s < S; ++s) o += ga[h][s] * wk[s];
                STORE(gx + (n * H + h) * D, o, D);
            }
        }
    }
    memcpy(gwkt, acck, sizeof acck);
    memcpy(gwv, accv, sizeof accv);
    memcpy(gbv, &accb, sizeof accb);
}
