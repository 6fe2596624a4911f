/* The fused CPU kernel of GEA's external units (Eqs. 3-4 of GEAET, one head split), float32.
 *
 * Compiled by gea_graph/nn/native.py with -DD=<head channels> -DS=<units> -DH=<heads> -DVD=<lanes >= D>
 * -DVS=<lanes >= S> (VD, VS powers of two): every row is a GCC vector of VS (or VD) floats, padded with zeros.
 * Rows are node-head pairs: row n * H + h is head h of node n. Groups are graphs (index[n], or one group).
 *
 * forward:  a = x Wk^T, p = softmax of a over each group's rows (per head and unit, shifted by the group's
 *           maximum), rho = eps + sum_s p, alpha = p / rho, out = alpha Wv^T + bv. Without eps (eps < 0), a row
 *           whose sum of p is below FLT_MIN (all its values underflowed) takes alpha = softmax_s(log p_s), the
 *           exact value of p / sum p, from its logits (log p = a - max - log z).
 * backward: for the incoming gradient G of out, with Ga = G Wv:
 *           s = alpha * (Ga - <Ga, alpha>), ga = s - p * sum_group(s),
 *           dWv = G^T alpha, dbv = sum G, dWk = ga^T x, dx = ga Wk.
 *
 * Each pass runs over the N nodes once; the caller turns the group sums of one pass into the next pass's input.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* aligned(4): rows of a buffer sit at any float offset (unaligned vector loads cost nothing extra on the
 * processors of the last decade) */
typedef float vs_t __attribute__((vector_size(VS * sizeof(float)), aligned(4)));
typedef float vd_t __attribute__((vector_size(VD * sizeof(float)), aligned(4)));
typedef int32_t vsi_t __attribute__((vector_size(VS * sizeof(float)), aligned(4)));

static const vs_t ZERO_S = {0}; /* ZERO_S + c broadcasts c */

/* Loads and stores of the first n floats of a vector (the rest loads as zero). */
#define LOAD(v, src, n) do { memset(&(v), 0, sizeof(v)); memcpy(&(v), (src), (n) * sizeof(float)); } while (0)
#define STORE(dst, v, n) memcpy((dst), &(v), (n) * sizeof(float))

static inline vs_t vmax(vs_t a, vs_t b) {
    vsi_t m = a > b;
    return (vs_t)((m & (vsi_t)a) | (~m & (vsi_t)b));
}

static inline float hsum(vs_t v) { /* pairwise: log2(VS) dependent adds, not VS */
    float t[VS];
    memcpy(t, &v, sizeof v);
    for (int w = VS / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; ++i) t[i] += t[i + w];
    return t[0];
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

#include "block_sums.h" /* BLOCK, flush, store_totals */

/* Forward 1: logits a = x Wk^T into p, and their per-group maxima into mx_out [G H][VS]. */
void gea_forward_logits(int64_t N, int64_t G, const float *restrict x, const int64_t *restrict index,
                        const float *restrict wkt /* [D][VS] */, float *restrict p /* [N H][S] */,
                        float *restrict mx_out) {
    vs_t wk[D];
    for (int d = 0; d < D; ++d) memcpy(&wk[d], wkt + d * VS, sizeof(vs_t));
    vs_t *restrict mx = (vs_t *)mx_out;
    for (int64_t i = 0; i < G * H; ++i) mx[i] = ZERO_S - 3.40282347e38f;
    for (int64_t n = 0; n < N; ++n) {
        const float *xn = x + n * H * D;
        vs_t *m = mx + GROUP(index, n) * H;
        vs_t a[H];
        for (int h = 0; h < H; ++h) a[h] = ZERO_S;
        for (int d = 0; d < D; ++d)
            for (int h = 0; h < H; ++h) a[h] += xn[h * D + d] * wk[d];
        for (int h = 0; h < H; ++h) { m[h] = vmax(m[h], a[h]); STORE(p + (n * H + h) * S, a[h], S); }
    }
}

/* Forward 2: e = exp(a - max) in place in p, and its group sums into z_out [G H][VS]. */
void gea_forward_exp(int64_t N, int64_t G, const int64_t *restrict index,
                     const float *restrict mx_in, float *restrict p, float *restrict z_out) {
    const vs_t *restrict mx = (const vs_t *)mx_in;
    vs_t *restrict z = (vs_t *)z_out;
    double one_group[H * VS]; /* one group (no index): the whole batch's sums, in blocks as the weights' */
    memset(one_group, 0, sizeof one_group);
    for (int64_t i = 0; i < G * H; ++i) z[i] = ZERO_S;
    for (int64_t n = 0; n < N; ++n) {
        int64_t g = GROUP(index, n) * H;
        for (int h = 0; h < H; ++h) {
            vs_t a;
            LOAD(a, p + (n * H + h) * S, S);
            vs_t e = exp_nonpositive(a - mx[g + h]);
            z[g + h] += e;
            STORE(p + (n * H + h) * S, e, S);
        }
        if (!index && n % BLOCK == BLOCK - 1) flush(one_group, z, H * VS);
    }
    if (!index) {
        flush(one_group, z, H * VS);
        store_totals((float *)z, one_group, H * VS);
    }
}

/* alpha of a row whose p all underflowed (eps < 0 only): softmax over the S units of log p = a - max + log(1 / z),
 * the logits recomputed from the row of x. */
static void alpha_from_logits(const float *restrict xr, const float *restrict wkt, const float *restrict mx,
                              const float *restrict zinv, float *restrict q) {
    float l[S], top = -FLT_MAX, total = 0.0f;
    for (int s = 0; s < S; ++s) {
        float a = 0.0f;
        for (int d = 0; d < D; ++d) a += xr[d] * wkt[d * VS + s];
        l[s] = a - mx[s] + logf(zinv[s]);
        top = l[s] > top ? l[s] : top;
    }
    for (int s = 0; s < S; ++s) { l[s] = expf(l[s] - top); total += l[s]; }
    for (int s = 0; s < VS; ++s) q[s] = s < S ? l[s] / total : 0.0f;
}

/* Forward 3: p = e / z (zinv_in = 1 / z), alpha = p / (eps + sum_s p), out = alpha Wv^T + bv. eps < 0:
 * no eps (x, wkt and mx are then read for the rows that underflow; otherwise they may be NULL). */
void gea_forward_out(int64_t N, const int64_t *restrict index, const float *restrict zinv_in,
                     const float *restrict wvt /* [S][VD] */, const float *restrict bv /* [VD] or NULL */,
                     float eps, const float *restrict x, const float *restrict wkt, const float *restrict mx_in,
                     float *restrict p, float *restrict alpha, float *restrict out /* [N H][D] */) {
    vd_t wv[S], b;
    for (int s = 0; s < S; ++s) memcpy(&wv[s], wvt + s * VD, sizeof(vd_t));
    if (bv) memcpy(&b, bv, sizeof b); else memset(&b, 0, sizeof b);
    const vs_t *restrict zinv = (const vs_t *)zinv_in;
    for (int64_t n = 0; n < N; ++n) {
        int64_t g = GROUP(index, n) * H;
        float qs[H][VS]; /* alpha as scalars: broadcast from memory (a lane of a register costs a shuffle) */
        for (int h = 0; h < H; ++h) {
            int64_t row = n * H + h;
            vs_t q;
            LOAD(q, p + row * S, S); /* padded lanes load as 0 and stay 0 */
            q *= zinv[g + h];
            STORE(p + row * S, q, S);
            float rho = hsum(q);
            if (eps >= 0.0f || rho >= FLT_MIN) {
                q *= 1.0f / (rho + (eps >= 0.0f ? eps : 0.0f));
                memcpy(qs[h], &q, sizeof q);
            } else {
                alpha_from_logits(x + row * D, wkt, mx_in + (g + h) * VS, zinv_in + (g + h) * VS, qs[h]);
            }
            STORE(alpha + row * S, qs[h], S);
        }
        vd_t o[H];
        for (int h = 0; h < H; ++h) o[h] = b;
        for (int s = 0; s < S; ++s) /* the heads' products interleaved: H independent chains */
            for (int h = 0; h < H; ++h) o[h] += qs[h][s] * wv[s];
        for (int h = 0; h < H; ++h) STORE(out + (n * H + h) * D, o[h], D);
    }
}

/* Backward 1: s = alpha (Ga - <Ga, alpha>) into sbuf [N H][VS]; its group sums (t_out [G H][VS]),
 * dWv (gwv [D][VS]) and dbv (gbv [VD]). */
void gea_backward_s(int64_t N, int64_t G, const int64_t *restrict index,
                    const float *restrict wvp /* [D][VS] */, const float *restrict alpha,
                    const float *restrict grad /* [N H][D] */, float *restrict sbuf, float *restrict t_out,
                    float *restrict gwv, float *restrict gbv) {
    vs_t wv[D], accv[D];
    vd_t accb;
    double totv[D * VS], totb[VD], one_group[H * VS]; /* one group: the sums of s in blocks too */
    for (int d = 0; d < D; ++d) { memcpy(&wv[d], wvp + d * VS, sizeof(vs_t)); accv[d] = ZERO_S; }
    memset(&accb, 0, sizeof accb);
    memset(totv, 0, sizeof totv);
    memset(totb, 0, sizeof totb);
    memset(one_group, 0, sizeof one_group);
    vs_t *restrict t = (vs_t *)t_out, *restrict sv = (vs_t *)sbuf;
    for (int64_t i = 0; i < G * H; ++i) t[i] = ZERO_S;
    for (int64_t n = 0; n < N; ++n) {
        int64_t g = GROUP(index, n) * H;
        const float *gn = grad + n * H * D;
        vs_t al[H], ga[H];
        for (int h = 0; h < H; ++h) {
            vd_t gr;
            LOAD(gr, gn + h * D, D);
            LOAD(al[h], alpha + (n * H + h) * S, S);
            accb += gr;
            ga[h] = ZERO_S;
        }
        for (int d = 0; d < D; ++d) {
            vs_t acc = accv[d];
            for (int h = 0; h < H; ++h) { ga[h] += gn[h * D + d] * wv[d]; acc += gn[h * D + d] * al[h]; }
            accv[d] = acc;
        }
        for (int h = 0; h < H; ++h) {
            vs_t s = al[h] * (ga[h] - hsum(ga[h] * al[h]));
            t[g + h] += s;
            sv[n * H + h] = s;
        }
        if (n % BLOCK == BLOCK - 1) {
            flush(totv, accv, D * VS);
            flush(totb, &accb, VD);
            if (!index) flush(one_group, t, H * VS);
        }
    }
    if (!index) {
        flush(one_group, t, H * VS);
        store_totals((float *)t, one_group, H * VS);
    }
    flush(totv, accv, D * VS);
    flush(totb, &accb, VD);
    store_totals(gwv, totv, D * VS);
    store_totals(gbv, totb, VD);
}

/* Backward 2: ga = s - p sum_group(s) (t_in: the group sums of s), dWk^T (gwkt [D][VS])
 * and dx (gx [N H][D], or NULL). */
void gea_backward_x(int64_t N, const float *restrict x, const int64_t *restrict index,
                    const float *restrict wkp /* [S][VD] */, const float *restrict p, const float *restrict sbuf,
                    const float *restrict t_in, float *restrict gx, float *restrict gwkt_out) {
    vs_t acck[D];
    vd_t wk[S];
    double totk[D * VS];
    memset(totk, 0, sizeof totk);
    for (int s = 0; s < S; ++s) memcpy(&wk[s], wkp + s * VD, sizeof(vd_t));
    for (int d = 0; d < D; ++d) acck[d] = ZERO_S;
    const vs_t *restrict t = (const vs_t *)t_in, *restrict sv = (const vs_t *)sbuf;
    for (int64_t n = 0; n < N; ++n) {
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
            float gs[H][VS];
            vd_t o[H];
            for (int h = 0; h < H; ++h) { memcpy(gs[h], &ga[h], sizeof ga[h]); memset(&o[h], 0, sizeof o[h]); }
            for (int s = 0; s < S; ++s)
                for (int h = 0; h < H; ++h) o[h] += gs[h][s] * wk[s];
            for (int h = 0; h < H; ++h) STORE(gx + (n * H + h) * D, o[h], D);
        }
        if (n % BLOCK == BLOCK - 1) flush(totk, acck, D * VS);
    }
    flush(totk, acck, D * VS);
    store_totals(gwkt_out, totk, D * VS);
}
