/* All-pairs hop distances and the first edges of one shortest path per pair, of many graphs (the native path of
 * gea_graph/transforms/spd.py: shortest_paths_many, whose numpy path gives the same arrays).
 *
 * Compiled by gea_graph.native with -DDIST_T=<distance type> -DPATH_T=<edge id type> (C integer types).
 *
 * Graph g has num_nodes[g] nodes, numbered globally graph after graph; nbr [M][W] holds each node's undirected
 * neighbours (global ids, ascending, rows padded with the node itself) and nbr_edge [M][W] the graph-local edge id of
 * each step. Pairs (s, t) are row-major per graph, graphs in order. Writes
 *   spd  [P]:           min(d(s, t), max_distance), max_distance + 1 where t is unreachable from s;
 *   path [P][max_path]: the edge ids along the path that steps from u through the first neighbour slot v with
 *                       d(v, t) = d(u, t) - 1, padded with -1.
 * work: n_max * n_max + n_max int32 (one graph's distances and a queue).
 */
#include <stdint.h>

void shortest_paths(int64_t num_graphs, const int64_t *restrict num_nodes, int64_t width,
                       const int64_t *restrict nbr, const int64_t *restrict nbr_edge, int64_t max_distance,
                       int64_t max_path, DIST_T *restrict spd, PATH_T *restrict path, int32_t *restrict work) {
    int64_t node0 = 0, pair0 = 0;
    for (int64_t g = 0; g < num_graphs; ++g) {
        const int64_t n = num_nodes[g];
        int32_t *restrict dist = work, *restrict queue = work + n * n;
        for (int64_t i = 0; i < n * n; ++i) dist[i] = -1;
        for (int64_t s = 0; s < n; ++s) { /* breadth-first search from s */
            int32_t *restrict ds = dist + s * n;
            int64_t head = 0, tail = 0;
            ds[s] = 0;
            queue[tail++] = (int32_t)s;
            while (head < tail) {
                const int64_t u = queue[head++];
                const int64_t *restrict row = nbr + (node0 + u) * width;
                for (int64_t j = 0; j < width; ++j) {
                    const int64_t v = row[j] - node0;
                    if (ds[v] < 0) {
                        ds[v] = ds[u] + 1;
                        queue[tail++] = (int32_t)v;
                    }
                }
            }
        }
        for (int64_t s = 0; s < n; ++s) {
            for (int64_t t = 0; t < n; ++t) {
                const int64_t p = pair0 + s * n + t;
                const int32_t d = dist[s * n + t];
                spd[p] = (DIST_T)(d < 0 ? max_distance + 1 : (d > max_distance ? max_distance : d));
                PATH_T *restrict out = path + p * max_path;
                int64_t k = 0, u = s;
                for (; k < max_path && d >= 0 && u != t; ++k) { /* one step towards t */
                    const int32_t closer = dist[u * n + t] - 1;
                    const int64_t *restrict row = nbr + (node0 + u) * width;
                    int64_t j = 0;
                    while (dist[(row[j] - node0) * n + t] != closer) ++j; /* a closer neighbour exists */
                    out[k] = (PATH_T)nbr_edge[(node0 + u) * width + j];
                    u = row[j] - node0;
                }
                for (; k < max_path; ++k) out[k] = (PATH_T)-1;
            }
        }
        node0 += n;
        pair0 += n * n;
    }
}
