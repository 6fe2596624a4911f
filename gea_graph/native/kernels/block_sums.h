/* Weight gradients are sums over all rows: each kernel sums them in float over a block of BLOCK rows (nodes) and
 * the blocks in double, so that the rounding error does not grow with the batch (a running float sum over 10^5
 * rows would be off by ~1e-4 relative, and data-parallel processes, which sum halves, would drift from one
 * process). Included by the kernels that sum weight gradients (gea_graph.native inlines it). */
#include <stdint.h>
#include <string.h>

#define BLOCK 32

/* Adds the n floats of a block sum to its double totals and zeroes the block. */
static inline void flush(double *restrict total, void *restrict part, int64_t n) {
    float f[n];
    memcpy(f, part, n * sizeof(float));
    for (int64_t i = 0; i < n; ++i) total[i] += f[i];
    memset(part, 0, n * sizeof(float));
}

/* The totals, rounded to float. */
static inline void store_totals(float *restrict dst, const double *restrict total, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = (float)total[i];
}
