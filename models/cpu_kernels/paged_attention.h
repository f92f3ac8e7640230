/* kvgate's paged attention: one query row against the keys and values of its sequence, read
   through a page table from bf16 pools. The same function serves prefill, appends and decode, and
   its arithmetic is fixed, so a row's output bits depend only on its q row and the keys and values
   it sees: never on the number of rows, the other rows, the table's width, the thread count, or
   the build (avx512, avx2 or scalar: the v16 lanes of kquant_vec.h, compiled with
   -ffp-contract=off, so nothing is fused unless written as an fma).

   For a query head h (kv head h / (heads / kv_heads)) of a row that sees keys 0..n-1:

     s_j  = v_sum(16 lanes, lane l = fma(q[d], k_j[d], lane) for d = l, l + 16, ... in order) * scale
            (k_j widened from bf16, which is exact; v_sum the fixed tree of kquant_vec.h)
     keys go in tiles of KEY_TILE = 64 counted from key 0, the last one partial; tile by tile:
       m  = max of the tile's s_j;  M' = max(M, m)
       c  = exp(M - M'), 0 on the first tile (M = -inf)
       p_j = exp(s_j - M') for the tile's keys (p = 0 for the slots of a partial tile past n)
       t  = v_sum((p[0:16] + p[16:32]) + (p[32:48] + p[48:64])), a fixed tree over the 64 slots
       l  = l * c + t                                  (a product, then a sum)
       acc = acc * c, then acc = fma(p_j, v_j, acc) for each key of the tile in key order
       M  = M'
     out = acc * (1 / l)

   exp is att_exp below, the same operations in every build: n = round-to-even(x * log2(e)) (by
   adding and subtracting 1.5 * 2^23), r = fma(-n, ln2_hi, x), r = fma(-n, ln2_lo, r), Cephes'
   degree-5 polynomial by fma, times 2^n built from exponent bits; x < -87 gives exactly 0 (so
   -inf gives 0, not NaN), x is taken as at most 88. Within 2 ulp of expf over [-87, 0], where
   its arguments always lie (measured: at most 1.01 ulp from the rounded exact e^x there).

   How it is run, none of which changes a bit: threads take (run of up to ATT_ROW_BLOCK consecutive
   rows of one sequence, kv head) pairs, static schedule; the run's rows and the kv head's query
   heads (up to ATT_QUERIES vectors) share each key tile, whose bf16 keys and values are widened
   once into the thread's buffers; scores are summed ATT_KEY_GROUP keys at a time with the very
   additions of v_sum; values are applied ATT_SHARE vectors at a time over the keys all of them
   see, then each vector alone over the rest of its keys. A single decode row is parallel over its
   kv heads only: splitting its keys among threads would change the arithmetic.

   Keys at or past a row's count are never read, so whatever the pool holds there (NaN, inf,
   another sequence's keys) cannot change the row.

   Built with AMX (the "amx" variant), paged_attention runs paged_attention_amx.h instead: the same
   tiles and softmax steps with the products in bf16 on AMX tiles, its own arithmetic and bits. */
#ifndef KVGATE_PAGED_ATTENTION_H
#define KVGATE_PAGED_ATTENTION_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kquant_vec.h"

#define KEY_TILE 64
#define ATT_ROW_BLOCK 16 /* consecutive rows of one sequence that share each widened key tile */
#define ATT_QUERIES 48   /* query vectors (rows x heads of one kv head) run against a tile at once */

#define ATT_LOG2E 1.44269504088896341f
#define ATT_LN2_HI 0.693145751953125f
#define ATT_LN2_LO 1.42860682030941723212e-6f
#define ATT_ROUNDER 12582912.0f /* 1.5 * 2^23: adding it rounds a float below 2^22 to an integer */

#if defined(__AVX512F__)
static inline v16 v_bf16(const uint16_t *p) {
    __m256i half = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}
/* 2^n for n held as the integer in the low bits of rounded = n + 1.5 * 2^23 */
static inline v16 v_pow2_rounded(v16 rounded) {
    __m512i n = _mm512_sub_epi32(_mm512_castps_si512(rounded), _mm512_castps_si512(_mm512_set1_ps(ATT_ROUNDER)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
}
static inline v16 v_min(v16 a, v16 b) { return _mm512_min_ps(a, b); }
static inline v16 v_max(v16 a, v16 b) { return _mm512_max_ps(a, b); }
/* lanes of x below limit become 0 */
static inline v16 v_zero_below(v16 value, v16 x, float limit) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(limit), _CMP_NLT_UQ), value);
}
#define ATT_KEY_GROUP 16 /* keys whose scores are summed at once: 16 accumulators fill half the registers */
/* out[j] = v_sum(a[j]) for j < 16: the very additions of v_sum's tree (lanes l + (l + 8), + 4, + 2,
   + 1), done for 16 keys at once by interleaving them, then put back in key order */
static inline void v_sum_group(const v16 *a, float *out) {
    __m512 half[8], quarter[4], eighth[2];
    for (int k = 0; k < 8; k++)  /* keys 2k, 2k + 1: lanes 0-7, 8-15 */
        half[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                                _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
    for (int k = 0; k < 4; k++)  /* keys 4k .. 4k + 3: one 128-bit lane each */
        quarter[k] = _mm512_add_ps(_mm512_shuffle_f32x4(half[2 * k], half[2 * k + 1], 0x88),
                                   _mm512_shuffle_f32x4(half[2 * k], half[2 * k + 1], 0xDD));
    for (int k = 0; k < 2; k++)  /* 128-bit lane m: keys 8k + m (2 lanes), 8k + m + 4 (2 lanes) */
        eighth[k] = _mm512_add_ps(_mm512_shuffle_ps(quarter[2 * k], quarter[2 * k + 1], 0x44),
                                  _mm512_shuffle_ps(quarter[2 * k], quarter[2 * k + 1], 0xEE));
    /* lane 4m + r holds key m + 4r */
    __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(eighth[0], eighth[1], 0x88),
                                _mm512_shuffle_ps(eighth[0], eighth[1], 0xDD));
    __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, sums));
}
#elif defined(__AVX2__) && defined(__FMA__)
static inline __m256 bf16x8(const uint16_t *p) {
    __m128i half = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}
static inline v16 v_bf16(const uint16_t *p) { return (v16){bf16x8(p), bf16x8(p + 8)}; }
static inline __m256 pow2x8(__m256 rounded) {
    __m256i n = _mm256_sub_epi32(_mm256_castps_si256(rounded), _mm256_castps_si256(_mm256_set1_ps(ATT_ROUNDER)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}
static inline v16 v_pow2_rounded(v16 rounded) { return (v16){pow2x8(rounded.lo), pow2x8(rounded.hi)}; }
static inline v16 v_min(v16 a, v16 b) { return (v16){_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
static inline v16 v_max(v16 a, v16 b) { return (v16){_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
static inline __m256 zero_below8(__m256 value, __m256 x, float limit) {
    return _mm256_and_ps(value, _mm256_cmp_ps(x, _mm256_set1_ps(limit), _CMP_NLT_UQ));
}
static inline v16 v_zero_below(v16 value, v16 x, float limit) {
    return (v16){zero_below8(value.lo, x.lo, limit), zero_below8(value.hi, x.hi, limit)};
}
#else
static inline float att_bits_float(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }
static inline uint32_t att_float_bits(float f) { uint32_t bits; memcpy(&bits, &f, 4); return bits; }
static inline v16 v_bf16(const uint16_t *p) {
    v16 v;
    for (int l = 0; l < 16; l++) v.lane[l] = att_bits_float((uint32_t)p[l] << 16);
    return v;
}
static inline v16 v_pow2_rounded(v16 rounded) {
    v16 v;
    for (int l = 0; l < 16; l++)
        v.lane[l] = att_bits_float((att_float_bits(rounded.lane[l]) - att_float_bits(ATT_ROUNDER) + 127u) << 23);
    return v;
}
/* as minps and maxps: the second operand where either is NaN or both are zeros */
V_LANEWISE(v_min, a.lane[l] < b.lane[l] ? a.lane[l] : b.lane[l])
V_LANEWISE(v_max, a.lane[l] > b.lane[l] ? a.lane[l] : b.lane[l])
static inline v16 v_zero_below(v16 value, v16 x, float limit) {
    for (int l = 0; l < 16; l++) value.lane[l] = x.lane[l] < limit ? 0.0f : value.lane[l];
    return value;
}
#endif

#ifndef ATT_KEY_GROUP
#define ATT_KEY_GROUP 4
static inline void v_sum_group(const v16 *a, float *out) {
    for (int j = 0; j < ATT_KEY_GROUP; j++) out[j] = v_sum(a[j]);
}
#endif

/* e^x lane by lane, the same operations in every build (see the top of the file) */
static inline v16 att_exp(v16 x) {
    v16 clamped = v_min(x, v_set1(88.0f));
    v16 rounded = v_add(v_mul(clamped, v_set1(ATT_LOG2E)), v_set1(ATT_ROUNDER));
    v16 n = v_sub(rounded, v_set1(ATT_ROUNDER));
    v16 minus_n = v_sub(v_zero(), n);
    v16 r = v_fma(minus_n, v_set1(ATT_LN2_HI), clamped);
    r = v_fma(minus_n, v_set1(ATT_LN2_LO), r);
    v16 p = v_set1(1.9875691500e-4f);
    p = v_fma(p, r, v_set1(1.3981999507e-3f));
    p = v_fma(p, r, v_set1(8.3334519073e-3f));
    p = v_fma(p, r, v_set1(4.1665795894e-2f));
    p = v_fma(p, r, v_set1(1.6666665459e-1f));
    p = v_fma(p, r, v_set1(5.0000001201e-1f));
    v16 y = v_add(v_fma(p, v_mul(r, r), r), v_set1(1.0f));
    return v_zero_below(v_mul(y, v_pow2_rounded(rounded)), x, -87.0f);
}

static inline float att_exp1(float x) {
    float lanes[16];
    v_store(lanes, att_exp(v_set1(x)));
    return lanes[0];
}

/* what one thread works in: the widened key and value tiles and each query vector's state */
typedef struct {
    float *keys;           /* KEY_TILE rows of dim, interleaved as att_key_at places them */
    float *values;         /* [KEY_TILE][dim] */
    float *acc;            /* [ATT_QUERIES][dim] */
    float *p;              /* [ATT_QUERIES][KEY_TILE]: scores, then their exps */
    float max[ATT_QUERIES], sum[ATT_QUERIES];
} att_scratch;

/* the query vectors of one kv head run together: q[i] a query head's row, n[i] how many keys it sees */
typedef struct {
    const float *q[ATT_QUERIES];
    float *out[ATT_QUERIES];
    int n[ATT_QUERIES];
    int count;
} att_queries;

static size_t att_scratch_floats(int dim) { return (size_t)dim * (2 * KEY_TILE + ATT_QUERIES) + ATT_QUERIES * KEY_TILE; }

static void att_scratch_init(att_scratch *s, float *memory, int dim) {
    s->keys = memory;
    s->values = s->keys + (size_t)KEY_TILE * dim;
    s->acc = s->values + (size_t)KEY_TILE * dim;
    s->p = s->acc + (size_t)ATT_QUERIES * dim;
}

/* the tile's key rows, widened and interleaved as att_scores reads them: for each group of
   ATT_KEY_GROUP keys, for each 16 dims, the group's keys one after another */
static inline float *att_key_at(float *keys, int j, int d, int dim) {
    return keys + (((size_t)(j / ATT_KEY_GROUP) * (dim / 16) + d / 16) * ATT_KEY_GROUP + j % ATT_KEY_GROUP) * 16;
}

#define ATT_PREFETCH 12 /* keys ahead whose rows are asked for while one is widened: slots are scattered */

static inline void att_prefetch_row(const uint16_t *row, int dim) {
    for (int b = 0; b < dim * 2; b += 64) __builtin_prefetch((const char *)row + b);
}

/* the tile's first count keys and values widened (keys as att_key_at, values [KEY_TILE][dim]);
   ahead: how many of the slots from here on the rows see, of which the next ones are prefetched */
static void att_widen_tile(att_scratch *s, const uint16_t *k_pool, const uint16_t *v_pool, const int64_t *slots,
                           int count, int ahead, int kv_head, int kv_heads, int dim) {
    for (int j = 0; j < count; j++) {
        if (j + ATT_PREFETCH < ahead) {
            size_t later = ((size_t)slots[j + ATT_PREFETCH] * kv_heads + kv_head) * dim;
            att_prefetch_row(k_pool + later, dim);
            att_prefetch_row(v_pool + later, dim);
        }
        size_t at = ((size_t)slots[j] * kv_heads + kv_head) * dim;
        for (int d = 0; d < dim; d += 16) {
            v_store(att_key_at(s->keys, j, d, dim), v_bf16(k_pool + at + d));
            v_store(s->values + (size_t)j * dim + d, v_bf16(v_pool + at + d));
        }
    }
}

/* scores of query i over the tile's first n keys into p, the slots past n -inf; returns their max
   (the sign of a zero max never shows: x - 0 and x - -0 are equal, exp(0) = exp(-0) = 1).
   ATT_KEY_GROUP keys at a time (key rows past n are stale and their scores dropped) */
static float att_scores(att_scratch *s, const float *q, int i, int n, int dim, float scale) {
    float *p = s->p + i * KEY_TILE, lanes_max[16], best = -INFINITY;
    for (int first = 0; first < n; first += ATT_KEY_GROUP) {
        const float *keys = att_key_at(s->keys, first, 0, dim);
        v16 lanes[ATT_KEY_GROUP];
        for (int j = 0; j < ATT_KEY_GROUP; j++) lanes[j] = v_zero();
        for (int d = 0; d < dim; d += 16, keys += 16 * ATT_KEY_GROUP) {
            v16 qd = v_load(q + d);
            for (int j = 0; j < ATT_KEY_GROUP; j++) lanes[j] = v_fma(qd, v_load(keys + 16 * j), lanes[j]);
        }
        v_sum_group(lanes, p + first);
    }
    for (int j = n; j < KEY_TILE; j++) p[j] = -INFINITY;
    v16 scores_max = v_set1(-INFINITY), factor = v_set1(scale);
    for (int c = 0; c < KEY_TILE / 16; c++) {
        v16 scores = v_mul(v_load(p + 16 * c), factor);
        v_store(p + 16 * c, scores);
        scores_max = v_max(scores_max, scores);
    }
    v_store(lanes_max, scores_max);
    for (int l = 0; l < 16; l++) best = lanes_max[l] > best ? lanes_max[l] : best;
    return best;
}

/* turns query i's scores into p_j = exp(s_j - max) and returns their fixed-tree sum */
static float att_exps(att_scratch *s, int i, float max) {
    float *p = s->p + i * KEY_TILE;
    v16 shift = v_set1(max), part[KEY_TILE / 16];
    for (int c = 0; c < KEY_TILE / 16; c++) {
        part[c] = att_exp(v_sub(v_load(p + 16 * c), shift));
        v_store(p + 16 * c, part[c]);
    }
    return v_sum(v_add(v_add(part[0], part[1]), v_add(part[2], part[3])));
}

#define ATT_SHARE 3 /* query vectors that share each loaded value row: 12 accumulators of 4 lane groups */

/* for the k query vectors of index: acc = acc * c where rescale, then acc = fma(p_j, v_j, acc) for
   keys j = from .. to - 1 in order; 64 dims at a time, each value load serving all k */
static inline __attribute__((always_inline)) void att_accumulate(att_scratch *s, const int *index, const int k,
                                                                  int from, int to, const float *c, int rescale,
                                                                  int dim) {
    float *acc[ATT_SHARE];
    const float *p[ATT_SHARE];
    for (int u = 0; u < k; u++) {
        acc[u] = s->acc + (size_t)index[u] * dim;
        p[u] = s->p + index[u] * KEY_TILE;
    }
    int d = 0;
    for (; d + 64 <= dim; d += 64) {
        v16 a[ATT_SHARE][4];
        for (int u = 0; u < k; u++)
            for (int g = 0; g < 4; g++) {
                a[u][g] = v_load(acc[u] + d + 16 * g);
                if (rescale) a[u][g] = v_mul(a[u][g], v_set1(c[u]));
            }
        for (int j = from; j < to; j++) {
            const float *v = s->values + (size_t)j * dim + d;
            v16 row[4] = {v_load(v), v_load(v + 16), v_load(v + 32), v_load(v + 48)};
            for (int u = 0; u < k; u++) {
                v16 weight = v_set1(p[u][j]);
                for (int g = 0; g < 4; g++) a[u][g] = v_fma(weight, row[g], a[u][g]);
            }
        }
        for (int u = 0; u < k; u++)
            for (int g = 0; g < 4; g++) v_store(acc[u] + d + 16 * g, a[u][g]);
    }
    for (; d < dim; d += 16)
        for (int u = 0; u < k; u++) {
            v16 a = v_load(acc[u] + d);
            if (rescale) a = v_mul(a, v_set1(c[u]));
            for (int j = from; j < to; j++) a = v_fma(v_set1(p[u][j]), v_load(s->values + (size_t)j * dim + d), a);
            v_store(acc[u] + d, a);
        }
}

/* query vector i's softmax state over a tile where it sees n keys: leaves p_j in its row of p and
   returns c, the factor its acc must take */
static float att_softmax(att_scratch *s, const float *q, int i, int n, int dim, float scale) {
    float tile_max = att_scores(s, q, i, n, dim, scale);
    float new_max = tile_max > s->max[i] ? tile_max : s->max[i];
    float c = s->max[i] == -INFINITY ? 0.0f : att_exp1(s->max[i] - new_max);
    float t = att_exps(s, i, new_max);
    s->sum[i] = s->sum[i] * c + t;
    s->max[i] = new_max;
    return c;
}

/* one tile (keys first .. first + KEY_TILE - 1) for every query vector that sees any of it: the
   values go ATT_SHARE vectors at a time over the keys all of them see, then each on its own over
   the rest it sees, so every vector still takes its keys in order */
static void att_tile(att_scratch *s, const att_queries *qs, int first, int dim, float scale) {
    int index[ATT_QUERIES], n[ATT_QUERIES], active = 0;
    float c[ATT_QUERIES];
    for (int i = 0; i < qs->count; i++) {
        int seen = qs->n[i] - first;
        if (seen <= 0) continue;
        index[active] = i;
        n[active] = seen < KEY_TILE ? seen : KEY_TILE;
        c[active] = att_softmax(s, qs->q[i], i, n[active], dim, scale);
        active++;
    }
    for (int g = 0; g < active; g += ATT_SHARE) {
        int k = active - g < ATT_SHARE ? active - g : ATT_SHARE, common = n[g];
        for (int u = 1; u < k; u++) common = n[g + u] < common ? n[g + u] : common;
        if (k == 3) att_accumulate(s, index + g, 3, 0, common, c + g, 1, dim);
        else if (k == 2) att_accumulate(s, index + g, 2, 0, common, c + g, 1, dim);
        else att_accumulate(s, index + g, 1, 0, common, c + g, 1, dim);
        for (int u = 0; u < k; u++)
            if (n[g + u] > common) att_accumulate(s, index + g + u, 1, common, n[g + u], c + g + u, 0, dim);
    }
}

/* every query vector of qs over all the keys it sees, through the sequence's slots */
static void att_queries_run(att_scratch *s, const att_queries *qs, const uint16_t *k_pool, const uint16_t *v_pool,
                            const int64_t *slots, int kv_head, int kv_heads, int dim, float scale) {
    int keys = 0;
    for (int i = 0; i < qs->count; i++) {
        keys = qs->n[i] > keys ? qs->n[i] : keys;
        s->max[i] = -INFINITY;
        s->sum[i] = 0.0f;
        memset(s->acc + (size_t)i * dim, 0, sizeof(float) * dim);
    }
    for (int first = 0; first < keys; first += KEY_TILE) {
        int count = keys - first < KEY_TILE ? keys - first : KEY_TILE;
        att_widen_tile(s, k_pool, v_pool, slots + first, count, keys - first, kv_head, kv_heads, dim);
        att_tile(s, qs, first, dim, scale);
    }
    for (int i = 0; i < qs->count; i++) {
        v16 inverse = v_set1(1.0f / s->sum[i]);
        for (int d = 0; d < dim; d += 16) v_store(qs->out[i] + d, v_mul(v_load(s->acc + (size_t)i * dim + d), inverse));
    }
}

/* rows first .. first + count - 1 (one sequence), the query heads of kv_head, ATT_QUERIES vectors at a time */
static void att_rows(att_scratch *s, const float *q, float *out, const uint16_t *k_pool, const uint16_t *v_pool,
                     const int64_t *slots, const int32_t *row_keys, int first, int count, int heads, int kv_heads,
                     int kv_head, int dim, float scale) {
    int group = heads / kv_heads, total = count * group;
    att_queries qs;
    for (int start = 0; start < total; start += ATT_QUERIES) {
        qs.count = total - start < ATT_QUERIES ? total - start : ATT_QUERIES;
        for (int i = 0; i < qs.count; i++) {
            int row = first + (start + i) / group, head = kv_head * group + (start + i) % group;
            size_t at = ((size_t)row * heads + head) * dim;
            qs.q[i] = q + at;
            qs.out[i] = out + at;
            qs.n[i] = row_keys[row];
        }
        att_queries_run(s, &qs, k_pool, v_pool, slots, kv_head, kv_heads, dim, scale);
    }
}

/* splits the rows into runs of consecutive rows of one sequence: run r is
   rows starts[r] .. starts[r + 1] - 1 (at most block rows); returns how many */
static int att_runs(const int32_t *row_seq, int rows, int *starts, int block) {
    int runs = 0;
    for (int row = 0; row < rows; row++)
        if (row == 0 || row_seq[row] != row_seq[row - 1] || row - starts[runs - 1] == block) starts[runs++] = row;
    starts[runs] = rows;
    return runs;
}

#if defined(__AMX_BF16__)
#include "paged_attention_amx.h"
#endif

/* 0 where this build may run here: the amx build asks the OS for its tiles (once is enough for the
   whole process), the others need nothing */
int kvgate_attention_ready(void) {
#if defined(__AMX_BF16__)
    return amx_permitted();
#else
    return 0;
#endif
}

/* q fp32 [rows][heads][dim]; k_pool, v_pool bf16 bits [slots][kv_heads][dim]; tables int64
   [seqs][width], tables[s][j] the pool slot of key j of sequence s; row_seq int32 [rows] each row's
   sequence; row_keys int32 [rows] how many keys (0 .. row_keys - 1) each row sees, at least 1;
   out fp32 [rows][heads][dim]. heads a multiple of kv_heads, dim a multiple of 16. Threads take
   (run of rows, kv head) pairs, static schedule. Returns 0, or -1 where working memory could not
   be had (out is then incomplete). */
static int paged_attention(const float *q, const uint16_t *k_pool, const uint16_t *v_pool, const int64_t *tables,
                           int width, const int32_t *row_seq, const int32_t *row_keys, float *out, int rows, int heads,
                           int kv_heads, int dim, float scale, int threads) {
#if defined(__AMX_BF16__)
    return paged_attention_amx(q, k_pool, v_pool, tables, width, row_seq, row_keys, out, rows, heads, kv_heads, dim,
                               scale, threads);
#endif
    int *starts = malloc(sizeof(int) * ((size_t)rows + 1)), failed = 0;
    if (!starts) return -1;
    long work = (long)att_runs(row_seq, rows, starts, ATT_ROW_BLOCK) * kv_heads;
#pragma omp parallel num_threads(threads) if (work > 1) reduction(| : failed)
    {
        float *memory = aligned_alloc(64, (sizeof(float) * att_scratch_floats(dim) + 63) / 64 * 64);
        att_scratch s = {0};
        failed = memory == NULL;
        if (memory) {
            memset(memory, 0, sizeof(float) * att_scratch_floats(dim));
            att_scratch_init(&s, memory, dim);
        }
#pragma omp for schedule(static)
        for (long w = 0; w < work; w++) {
            int run = (int)(w / kv_heads), first = starts[run];
            if (memory)
                att_rows(&s, q, out, k_pool, v_pool, tables + (size_t)row_seq[first] * width, row_keys, first,
                         starts[run + 1] - first, heads, kv_heads, (int)(w % kv_heads), dim, scale);
        }
        free(memory);
    }
    free(starts);
    return failed ? -1 : 0;
}
#endif
