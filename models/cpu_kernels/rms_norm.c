/* RMSNorm of bf16 rows, each row on its own (so any batch or split of rows gives the same bits):

     r = 1 / sqrt(sum(x^2) / cols + eps)        in fp32, the sum in 8 lanes over the row's columns
                                                 in order, the lanes added as a fixed tree
     y = bf16((x * r) * w)                       in fp32, rounded once, as torch's F.rms_norm does

   x, y: bf16 [rows][cols], cols a multiple of 8; w: bf16 [cols]. torch's F.rms_norm costs ~60 µs
   a call on a decode row (it is eight tensor ops); this is one. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "bf16.h"

static inline __m256 load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static inline float lanes_sum(__m256 v) {
    v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 0x1));
    v = _mm256_add_ps(v, _mm256_shuffle_ps(v, v, 0x4E));
    v = _mm256_add_ps(v, _mm256_shuffle_ps(v, v, 0xB1));
    return _mm256_cvtss_f32(v);
}

static void norm_row(const uint16_t *x, const uint16_t *w, uint16_t *y, int cols, float eps) {
    __m256 squares = _mm256_setzero_ps();
    for (int c = 0; c < cols; c += 8) {
        __m256 v = load_bf16(x + c);
        squares = _mm256_fmadd_ps(v, v, squares);
    }
    float r = 1.0f / sqrtf(lanes_sum(squares) / (float)cols + eps);
    for (int c = 0; c < cols; c++) y[c] = f32_to_bf16(bf16_to_f32(x[c]) * r * bf16_to_f32(w[c]));
}

void rms_norm(const uint16_t *x, const uint16_t *w, uint16_t *y, int rows, int cols, float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (rows >= 64)
    for (int row = 0; row < rows; row++) norm_row(x + (size_t)row * cols, w, y + (size_t)row * cols, cols, eps);
}
