/* The exported entry points of kvgate's paged attention (paged_attention.h, where the arithmetic
   is written down); the fused layers include the header and call paged_attention directly. */
#include "paged_attention.h"

const char *paged_attention_variant(void) { return VARIANT; }

/* arguments and result as paged_attention in paged_attention.h */
int kvgate_paged_attention(const float *q, const uint16_t *k_pool, const uint16_t *v_pool, const int64_t *tables,
                           int width, const int32_t *row_seq, const int32_t *row_keys, float *out, int rows,
                           int heads, int kv_heads, int dim, float scale, int threads) {
    return paged_attention(q, k_pool, v_pool, tables, width, row_seq, row_keys, out, rows, heads, kv_heads, dim,
                           scale, threads);
}
