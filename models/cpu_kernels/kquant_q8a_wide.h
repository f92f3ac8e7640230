/* The q8a arithmetic's rows x COL_TILE tiles (kquant_q8a_rows.h) with two weight columns in each
   AVX-512 VNNI register: the low 8 lanes are one output's 8 lanes, the high 8 the next column's, so
   each vpdpbusd, conversion and fma does two outputs' steps of the same definition, with the same
   bits. Built only where the compiler has AVX-512 VNNI; elsewhere the rows path takes wblocks. */
#ifndef KVGATE_KQUANT_Q8A_WIDE_H
#define KVGATE_KQUANT_Q8A_WIDE_H
#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512F__)
#define Q8A_WIDE 1
#include <immintrin.h>
#include <stddef.h>

#include "kquant_q8a.h"

/* columns c and c + 1 of a block: quants (Q8_0's as w + 128, unsigned), lane scales, mins */
typedef struct { __m512i w; __m512 d; float m[2]; } wpair;
#define Q8A_BUFFER_BYTES(blocks) ((sizeof(wpair) * (COL_TILE / 2) * (size_t)(blocks) + 63) / 64 * 64)

static inline __m512 pair_scales(wblock a, wblock b) {
    __m256 low = _mm256_set_m128(_mm_set1_ps(a.d_high), _mm_set1_ps(a.d));
    __m256 high = _mm256_set_m128(_mm_set1_ps(b.d_high), _mm_set1_ps(b.d));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(low)), _mm256_castps_pd(high), 1));
}

INLINE wpair read_pair(int type, const uint8_t *raw, size_t row_bytes, int b) {
    wblock a = read_block(type, raw, b), c = read_block(type, raw + row_bytes, b);
    __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(a.w), c.w, 1);
    if (type == Q8_0) w = _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    return (wpair){w, pair_scales(a, c), {a.m, c.m}};
}

static inline __m512i twice(const void *p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)); }

/* rows (<= Q8A_ROW_TILE) x COL_TILE outputs from pairs [COL_TILE / 2][blocks]: q8a_dots' definition */
INLINE void q8a_wide_dots(int type, int rows, const wpair *pairs, const xblock *x, int blocks, float *y, int N) {
    int with_min = type == Q4_1 || type == Q5_1 || type == Q4_K || type == Q5_K;
    __m512 lanes[Q8A_ROW_TILE][COL_TILE / 2];
    float mins[Q8A_ROW_TILE][COL_TILE] = {{0}};
    #pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
        #pragma GCC unroll 2
        for (int p = 0; p < COL_TILE / 2; p++) lanes[r][p] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++)
        #pragma GCC unroll 4
        for (int r = 0; r < rows; r++) {
            const xblock *xb = x + (size_t)r * blocks + b;
            __m512i xq = twice(xb->q);
            __m512i start = type == Q8_0 ? _mm512_slli_epi32(twice(xb->minus8), 4)  /* -128 * lane sums */
                            : type == Q4_0 ? twice(xb->minus8) : type == Q5_0 ? twice(xb->minus16)
                            : type == Q6_K ? twice(xb->minus32) : _mm512_setzero_si512();
            __m512 dx = _mm512_set1_ps(xb->d);
            #pragma GCC unroll 2
            for (int p = 0; p < COL_TILE / 2; p++) {
                const wpair *wp = pairs + (size_t)p * blocks + b;
                __m512 sums = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, wp->w, xq));
                lanes[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(wp->d, dx), sums, lanes[r][p]);
                if (with_min)
                    for (int i = 0; i < 2; i++) mins[r][2 * p + i] = fmaf(wp->m[i], xb->sum, mins[r][2 * p + i]);
            }
        }
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < COL_TILE / 2; p++) {
            __m256 low = _mm512_castps512_ps256(lanes[r][p]);
            __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lanes[r][p]), 1));
            y[(size_t)r * N + 2 * p] = f8_sum(low) + mins[r][2 * p];
            y[(size_t)r * N + 2 * p + 1] = f8_sum(high) + mins[r][2 * p + 1];
        }
}
#endif
#endif
