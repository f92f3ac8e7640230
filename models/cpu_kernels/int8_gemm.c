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

void int8_gemm(const uint16_t *A, const int8_t *W, const uint16_t *scales, uint16_t *C,
               int M, int N, int K, int threads) {
    float *a = malloc(sizeof(float) * (size_t)M * K);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = bf16_to_f32(A[i]);
    int blocks = (N + COLUMNS - 1) / COLUMNS;
#pragma omp parallel num_threads(threads)
    {
        float *w = aligned_alloc(32, sizeof(float) * (size_t)COLUMNS * K);
#pragma omp for schedule(static)
        for (int t = 0; t < blocks; t++)
            block_rows(a, M, W, scales, C, w, N, K, t * COLUMNS, N - t * COLUMNS < COLUMNS ? N - t * COLUMNS : COLUMNS);
        free(w);
    }
    free(a);
}
