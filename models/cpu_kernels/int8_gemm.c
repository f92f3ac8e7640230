/* Int8 weight-only matmul (one scale per output row), bit for bit torch's AVX2 `_weight_int8pack_mm`.

   For every output element torch keeps 8 fp32 lanes; step s (k = 8s .. 8s + 7) does
   lane += a[k] * (float(q[n, k]) * scale[n]) as one FMA per lane (the weight times its scale
   rounded first), and at the end adds lanes as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
   and rounds the sum to bf16. This does the same, eight output columns at a time (eight chains
   in flight against torch's four, and each weight read once for all rows), threaded over column
   blocks in one OpenMP region.

   A: bf16 [M][K], K a multiple of 8. W: int8 [N][K]. scales: bf16 [N]. C: bf16 [M][N].
*/
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

#include "bf16.h"

static inline float lanes_sum(__m256 v) {
    v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 0x1));
    v = _mm256_add_ps(v, _mm256_shuffle_ps(v, v, 0x4E));
    v = _mm256_add_ps(v, _mm256_shuffle_ps(v, v, 0xB1));
    return _mm256_cvtss_f32(v);
}

#define COLUMNS 8
#define WIDE_COLUMNS 16 /* the AVX-512 build's columns at a time */

/* Columns [n, n + count): their weights times their scales (rounded as torch rounds them) once
   into w [COLUMNS][K], then every row against them, eight accumulator chains at a time. */
static void block_rows(const float *a, int M, const int8_t *W, const uint16_t *scales, uint16_t *C,
                       float *w, int N, int K, int n, int count) {
    for (int j = 0; j < count; j++) {
        __m256 scale = _mm256_set1_ps(bf16_to_f32(scales[n + j]));
        for (int k = 0; k < K; k += 8) {
            __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(W + (size_t)(n + j) * K + k)));
            _mm256_store_ps(w + (size_t)j * K + k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), scale));
        }
    }
    for (int row = 0; row < M; row++) {
        const float *x_row = a + (size_t)row * K;
        __m256 acc[COLUMNS];
        for (int j = 0; j < COLUMNS; j++) acc[j] = _mm256_setzero_ps();
        for (int k = 0; k < K; k += 8) {
            __m256 x = _mm256_loadu_ps(x_row + k);
#pragma GCC unroll 8
            for (int j = 0; j < COLUMNS; j++)
                if (j < count) acc[j] = _mm256_fmadd_ps(x, _mm256_load_ps(w + (size_t)j * K + k), acc[j]);
        }
        for (int j = 0; j < count; j++) C[(size_t)row * N + n + j] = f32_to_bf16(lanes_sum(acc[j]));
    }
}

#if defined(__AVX512F__)
/* The same arithmetic with two columns' eight lanes in one AVX-512 register (lanes 0-7 column j,
   8-15 column j + 1), 16 columns at a time: every lane still takes fma(a[k], w, lane) in order of k
   and is added by lanes_sum's tree, so the bits are the AVX2 build's (and torch's). One or two
   rows decode each weight into registers as they go; more rows share a buffer of scaled weights. */
#define FUSED_ROWS 2

static inline __m512 join(__m256 low, __m256 high) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(low)), _mm256_castps_pd(high), 1));
}

/* the scaled weights of columns j, j + 1 at k .. k + 7, side by side */
static inline __m512 pair_weights(const int8_t *W, int K, int j, int k, __m512 scale) {
    __m128i q = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(W + (size_t)j * K + k)),
                                   _mm_loadl_epi64((const __m128i *)(W + (size_t)(j + 1) * K + k)));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), scale);
}

static inline void store_pairs(const __m512 *acc, uint16_t *c) {
    for (int p = 0; p < WIDE_COLUMNS / 2; p++) {
        c[2 * p] = f32_to_bf16(lanes_sum(_mm512_castps512_ps256(acc[p])));
        c[2 * p + 1] = f32_to_bf16(lanes_sum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1))));
    }
}

/* columns n .. n + WIDE_COLUMNS - 1, all of them present */
static void wide_rows(const float *a, int M, const int8_t *W, const uint16_t *scales, uint16_t *C, float *w, int N,
                      int K, int n) {
    __m512 scale[WIDE_COLUMNS / 2];
    for (int p = 0; p < WIDE_COLUMNS / 2; p++)
        scale[p] = join(_mm256_set1_ps(bf16_to_f32(scales[n + 2 * p])), _mm256_set1_ps(bf16_to_f32(scales[n + 2 * p + 1])));
    if (M > FUSED_ROWS)
        for (int k = 0; k < K; k += 8)
            for (int p = 0; p < WIDE_COLUMNS / 2; p++)
                _mm512_store_ps(w + ((size_t)k / 8 * (WIDE_COLUMNS / 2) + p) * 16, pair_weights(W, K, n + 2 * p, k, scale[p]));
    for (int row = 0; row < M; row++) {
        const float *x_row = a + (size_t)row * K;
        __m512 acc[WIDE_COLUMNS / 2];
        for (int p = 0; p < WIDE_COLUMNS / 2; p++) acc[p] = _mm512_setzero_ps();
        for (int k = 0; k < K; k += 8) {
            __m256 half = _mm256_loadu_ps(x_row + k);
            __m512 x = join(half, half);
#pragma GCC unroll 8
            for (int p = 0; p < WIDE_COLUMNS / 2; p++) {
                __m512 weights = M > FUSED_ROWS ? _mm512_load_ps(w + ((size_t)k / 8 * (WIDE_COLUMNS / 2) + p) * 16)
                                                : pair_weights(W, K, n + 2 * p, k, scale[p]);
                acc[p] = _mm512_fmadd_ps(x, weights, acc[p]);
            }
        }
        store_pairs(acc, C + (size_t)row * N + n);
    }
}
#endif

/* every full block of WIDE_COLUMNS columns wide where the build has AVX-512, the rest COLUMNS at a
   time; each column's arithmetic is the same either way */
void int8_gemm(const uint16_t *A, const int8_t *W, const uint16_t *scales, uint16_t *C,
               int M, int N, int K, int threads) {
    float *a = malloc(sizeof(float) * (size_t)M * K);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = bf16_to_f32(A[i]);
#if defined(__AVX512F__)
    int wide = N / WIDE_COLUMNS, buffer_columns = WIDE_COLUMNS;
#else
    int wide = 0, buffer_columns = COLUMNS;
#endif
    int narrow_first = wide * WIDE_COLUMNS, blocks = (N - narrow_first + COLUMNS - 1) / COLUMNS;
#pragma omp parallel num_threads(threads)
    {
        float *w = aligned_alloc(64, sizeof(float) * (size_t)buffer_columns * K);
#if defined(__AVX512F__)
#pragma omp for schedule(static)
        for (int t = 0; t < wide; t++) wide_rows(a, M, W, scales, C, w, N, K, t * WIDE_COLUMNS);
#endif
#pragma omp for schedule(static)
        for (int t = 0; t < blocks; t++) {
            int n = narrow_first + t * COLUMNS;
            block_rows(a, M, W, scales, C, w, N, K, n, N - n < COLUMNS ? N - n : COLUMNS);
        }
        free(w);
    }
    free(a);
}
