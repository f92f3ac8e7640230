/* Int4 weight-only matmul over torch's AVX2 int4pack layout, bit for bit torch's own arithmetic.

   C[m, n] = sum over k, in order, of fma(a[m, k], w[n, k], c) in fp32, rounded to bf16 at the end,
   where w = fma(float(q), scale, fma(scale, -8, zero)) with (scale, zero) the group's bf16 pair.
   That is what torch 2.13's AVX2 `_weight_int4pack_mm_for_cpu` computes for every output element;
   the Python side checks it bit for bit against torch at load and otherwise keeps torch's kernel.

   Why it is faster: its tiles keep everything in registers and reuse each dequantized weight
   across rows: one row runs 32 columns at a time; 2-4 rows run 16 columns by all the rows; from 5
   rows on, each 16-column strip is dequantized once into fp32 and run by 6-row tiles. It threads
   over column blocks of the whole matrix in one OpenMP region (the process's own OpenMP runtime:
   torch's, loaded first).

   Layout (torch's AVX2 packer): columns in blocks of 32; block b holds K rows of 16 bytes at
   B + b * K * 16, byte d of row k holding column d (low nibble) and column d + 16 (high nibble).
   ScaleAndZeros: bf16 [K / group][N][2]. A: bf16 [M][K] (lda = K). C: bf16 [M][N].
*/
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

#include "bf16.h"

/* scale and shifted zero of 8 columns [n, n + 8) of group g: each (scale, zero) bf16 pair is one
   32-bit lane, scale in its low half */
static inline void group_params(const uint16_t *sz, int N, int g, int n, __m256 *scale, float *zero) {
    __m256i pairs = _mm256_loadu_si256((const __m256i *)(sz + ((size_t)g * N + n) * 2));
    *scale = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
    __m256 z = _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32((int)0xffff0000u)));
    _mm256_store_ps(zero, _mm256_fmadd_ps(*scale, _mm256_set1_ps(-8.0f), z));
}

static inline void store_row(uint16_t *c, __m256 acc) {
    float out[8];
    _mm256_storeu_ps(out, acc);
    for (int i = 0; i < 8; i++) c[i] = f32_to_bf16(out[i]);
}

/* One row, the 32 columns of block b. Four accumulator chains are about as many as the vector
   units can feed here, and all of it stays in registers (the zeros are read from L1). */
static void tile_1x32(const float *a, const uint8_t *B, const uint16_t *sz, uint16_t *c,
                      int N, int K, int group, int b) {
    const __m256i mask = _mm256_set1_epi32(0xF);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    __m256 s0, s1, s2, s3;
    float zero[4][8] __attribute__((aligned(32)));
    const uint8_t *block = B + (size_t)b * K * 16;
    for (int g = 0, k = 0; g < K / group; g++) {
        group_params(sz, N, g, b * 32, &s0, zero[0]);
        group_params(sz, N, g, b * 32 + 8, &s1, zero[1]);
        group_params(sz, N, g, b * 32 + 16, &s2, zero[2]);
        group_params(sz, N, g, b * 32 + 24, &s3, zero[3]);
        for (int end = k + group; k < end; k++) {
            __m256 x = _mm256_broadcast_ss(a + k);
            __m128i bytes = _mm_loadu_si128((const __m128i *)(block + (size_t)k * 16));
            __m256i lo = _mm256_cvtepu8_epi32(bytes);
            __m256i hi = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(bytes, bytes));
            acc0 = _mm256_fmadd_ps(x, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(lo, mask)), s0,
                                                      _mm256_load_ps(zero[0])), acc0);
            acc1 = _mm256_fmadd_ps(x, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(hi, mask)), s1,
                                                      _mm256_load_ps(zero[1])), acc1);
            acc2 = _mm256_fmadd_ps(x, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(lo, 4)), s2,
                                                      _mm256_load_ps(zero[2])), acc2);
            acc3 = _mm256_fmadd_ps(x, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(hi, 4)), s3,
                                                      _mm256_load_ps(zero[3])), acc3);
        }
    }
    store_row(c + b * 32, acc0);
    store_row(c + b * 32 + 8, acc1);
    store_row(c + b * 32 + 16, acc2);
    store_row(c + b * 32 + 24, acc3);
}

/* The 16 weights of row k of one half of a block (8 bytes: columns [8h, 8h + 8) in the low
   nibbles, [8h + 16, 8h + 24) in the high ones), dequantized as torch does. */
static inline void half_block_weights(const uint8_t *row, __m256 s0, const float *z0, __m256 s1, const float *z1,
                                      __m256 *w0, __m256 *w1) {
    const __m256i mask = _mm256_set1_epi32(0xF);
    __m256i ints = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)row));
    *w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(ints, mask)), s0, _mm256_load_ps(z0));
    *w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(ints, 4)), s1, _mm256_load_ps(z1));
}

/* ROWS rows (1-4), 16 columns of block b: its columns [8h, 8h + 8) and [8h + 16, 8h + 24), which
   come from the same 8 bytes of each packed row. The dequantized weights serve every row. */
static inline __attribute__((always_inline)) void tile_rows_x16(
        const float *a, const int ROWS, const uint8_t *B, const uint16_t *sz, uint16_t *c,
        int N, int K, int group, int b, int h) {
    __m256 acc[4][2];
    #pragma GCC unroll 6
    for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    __m256 s0, s1;
    float zero[2][8] __attribute__((aligned(32)));
    const uint8_t *block = B + (size_t)b * K * 16 + h * 8;
    for (int g = 0, k = 0; g < K / group; g++) {
        group_params(sz, N, g, b * 32 + 8 * h, &s0, zero[0]);
        group_params(sz, N, g, b * 32 + 8 * h + 16, &s1, zero[1]);
        for (int end = k + group; k < end; k++) {
            __m256 w0, w1;
            half_block_weights(block + (size_t)k * 16, s0, zero[0], s1, zero[1], &w0, &w1);
            #pragma GCC unroll 6
            for (int r = 0; r < ROWS; r++) {
                __m256 x = _mm256_broadcast_ss(a + (size_t)r * K + k);
                acc[r][0] = _mm256_fmadd_ps(x, w0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(x, w1, acc[r][1]);
            }
        }
    }
    #pragma GCC unroll 6
    for (int r = 0; r < ROWS; r++) {
        store_row(c + (size_t)r * N + b * 32 + 8 * h, acc[r][0]);
        store_row(c + (size_t)r * N + b * 32 + 8 * h + 16, acc[r][1]);
    }
}

static void tile_4x16(const float *a, int rows, const uint8_t *B, const uint16_t *sz, uint16_t *c,
                      int N, int K, int group, int b, int h) {
    switch (rows) {
        case 1: tile_rows_x16(a, 1, B, sz, c, N, K, group, b, h); break;
        case 2: tile_rows_x16(a, 2, B, sz, c, N, K, group, b, h); break;
        case 3: tile_rows_x16(a, 3, B, sz, c, N, K, group, b, h); break;
        default: tile_rows_x16(a, 4, B, sz, c, N, K, group, b, h); break;
    }
}

/* The weights of 16 columns of block b (its columns [8h, 8h + 8) and [8h + 16, 8h + 24)) for
   every k, dequantized once into w [K][16] with the same rounding as above. */
static void strip_weights(const uint8_t *B, const uint16_t *sz, float *w, int N, int K, int group, int b, int h) {
    __m256 s0, s1;
    float zero[2][8] __attribute__((aligned(32)));
    const uint8_t *block = B + (size_t)b * K * 16 + h * 8;
    for (int g = 0, k = 0; g < K / group; g++) {
        group_params(sz, N, g, b * 32 + 8 * h, &s0, zero[0]);
        group_params(sz, N, g, b * 32 + 8 * h + 16, &s1, zero[1]);
        for (int end = k + group; k < end; k++) {
            __m256 w0, w1;
            half_block_weights(block + (size_t)k * 16, s0, zero[0], s1, zero[1], &w0, &w1);
            _mm256_store_ps(w + (size_t)k * 16, w0);
            _mm256_store_ps(w + (size_t)k * 16 + 8, w1);
        }
    }
}

/* ROWS rows (1-6) against a dequantized strip: 2 accumulators a row, one FMA per weight and row */
static inline __attribute__((always_inline)) void strip_rows(
        const float *a, const int ROWS, const float *w, uint16_t *c, int N, int K, int first) {
    __m256 acc[6][2];
    #pragma GCC unroll 6
    for (int r = 0; r < 6; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m256 w0 = _mm256_load_ps(w + (size_t)k * 16), w1 = _mm256_load_ps(w + (size_t)k * 16 + 8);
        #pragma GCC unroll 6
        for (int r = 0; r < ROWS; r++) {
            __m256 x = _mm256_broadcast_ss(a + (size_t)r * K + k);
            acc[r][0] = _mm256_fmadd_ps(x, w0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, w1, acc[r][1]);
        }
    }
    #pragma GCC unroll 6
    for (int r = 0; r < ROWS; r++) {
        store_row(c + (size_t)r * N + first, acc[r][0]);
        store_row(c + (size_t)r * N + first + 16, acc[r][1]);
    }
}

static void strip_tile(const float *a, int rows, const float *w, uint16_t *c, int N, int K, int first) {
    switch (rows) {
        case 1: strip_rows(a, 1, w, c, N, K, first); break;
        case 2: strip_rows(a, 2, w, c, N, K, first); break;
        case 3: strip_rows(a, 3, w, c, N, K, first); break;
        case 4: strip_rows(a, 4, w, c, N, K, first); break;
        case 5: strip_rows(a, 5, w, c, N, K, first); break;
        default: strip_rows(a, 6, w, c, N, K, first); break;
    }
}

/* C = A @ W.T for W [N, K] in the layout above; N a multiple of 64, K of group (a multiple of 32) */
void int4_gemm(const uint16_t *A, const uint8_t *B, const uint16_t *sz, uint16_t *C,
               int M, int N, int K, int group, int threads) {
    float *a = malloc(sizeof(float) * (size_t)M * K);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = bf16_to_f32(A[i]);
    if (M == 1) {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int b = 0; b < N / 32; b++) tile_1x32(a, B, sz, C, N, K, group, b);
    } else if (M <= 4) {
        int halves = N / 16;
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int half = 0; half < halves; half++) tile_4x16(a, M, B, sz, C, N, K, group, half / 2, half % 2);
    } else {
#pragma omp parallel num_threads(threads)
        {
            float *w = aligned_alloc(32, sizeof(float) * (size_t)K * 16);
#pragma omp for schedule(static)
            for (int half = 0; half < N / 16; half++) {
                int b = half / 2, h = half % 2;
                strip_weights(B, sz, w, N, K, group, b, h);
                for (int r = 0; r < M; r += 6)
                    strip_tile(a + (size_t)r * K, M - r < 6 ? M - r : 6, w, C + (size_t)r * N, N, K, b * 32 + 8 * h);
            }
            free(w);
        }
    }
    free(a);
}
