/* The two ways kquant runs weight rows against x rows: decoded straight into the dot product
   (dot_rows, one x row), or dequantized once into an fp32 buffer that tiles of x rows then share
   (dequantize_row + column_tile). Both feed each lane the same fma chain (kquant_vec.h). */
#ifndef KVGATE_KQUANT_ROWS_H
#define KVGATE_KQUANT_ROWS_H
#include <stddef.h>
#include <stdint.h>

#include "kquant_blocks.h"

#define COL_TILE 4

#define SCALE_RUN 16 /* blocks whose scales dot_rows and dequantize_row read at once */

/* the fp32 scales d (and mins m, where the type has them) of 32-weight blocks first..first+count-1
   (count <= SCALE_RUN) of a row: with AVX-512 one gather of their first four bytes and two
   conversions (the same exact conversion half_to_float does), so that the block loop broadcasts
   them from memory instead of converting and broadcasting each in vector registers */
static inline void block_scales(int type, const uint8_t *row, int first, int count, float *d, float *m) {
#if defined(__AVX512F__)
    __m512i offsets = _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
                                                                           1, 0), _mm512_set1_epi32(first)),
                                         _mm512_set1_epi32(BLOCK_BYTES[type]));
    __m512i words = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), (__mmask16)((1u << count) - 1), offsets, row, 1);
    _mm512_storeu_ps(d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)));
    _mm512_storeu_ps(m, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16))));
#else
    for (int i = 0; i < count; i++) {
        const uint8_t *block = row + (size_t)(first + i) * BLOCK_BYTES[type];
        d[i] = half_to_float(block);
        m[i] = has_min(type) ? half_to_float(block + 2) : 0.0f;
    }
#endif
}

/* one weight row of K values from its blocks */
static void dequantize_row(int type, const uint8_t *row, int K, float *w) {
    sink s = {0, w, NULL, 0, {v_zero()}};
    int blocks = K / BLOCK_WEIGHTS[type];
    if (BLOCK_WEIGHTS[type] == 32) {
        float d[SCALE_RUN], m[SCALE_RUN];
        for (int first = 0; first < blocks; first += SCALE_RUN) {
            int count = blocks - first < SCALE_RUN ? blocks - first : SCALE_RUN;
            block_scales(type, row, first, count, d, m);
            for (int i = 0; i < count; i++, s.w += 32)
                scaled_block_into(type, row + (size_t)(first + i) * BLOCK_BYTES[type], d[i], m[i], &s);
        }
        return;
    }
    for (int i = 0; i < blocks; i++, s.w += BLOCK_WEIGHTS[type]) block_into(type, row + i * BLOCK_BYTES[type], &s);
}

/* x rows 0..xrows-1 (K apart, xrows <= FUSED_ROWS) . `rows` (<= COL_TILE) weight rows (row_bytes
   apart) into y [xrows][ld], weights decoded on the fly and each 16 of them used by every x row; the
   weight rows go block by block side by side so that their fma chains overlap */
INLINE void dot_rows(int type, int xrows, int rows, const uint8_t *raw, size_t row_bytes, int K, const float *x,
                     float *y, int ld) {
    sink s[COL_TILE];
    int blocks = K / BLOCK_WEIGHTS[type];
    #pragma GCC unroll 4
    for (int c = 0; c < rows; c++) {
        s[c] = (sink){xrows, NULL, x, K, {v_zero()}};
        #pragma GCC unroll 8
        for (int r = 0; r < xrows; r++) s[c].acc[r] = v_zero();
    }
    if (BLOCK_WEIGHTS[type] == 32) {
        float d[COL_TILE][SCALE_RUN], m[COL_TILE][SCALE_RUN];
        for (int first = 0; first < blocks; first += SCALE_RUN) {
            int count = blocks - first < SCALE_RUN ? blocks - first : SCALE_RUN;
            #pragma GCC unroll 4
            for (int c = 0; c < rows; c++) block_scales(type, raw + c * row_bytes, first, count, d[c], m[c]);
            for (int i = 0; i < count; i++) {
                #pragma GCC unroll 4
                for (int c = 0; c < rows; c++) {
                    scaled_block_into(type, raw + c * row_bytes + (size_t)(first + i) * BLOCK_BYTES[type], d[c][i],
                                      m[c][i], &s[c]);
                    s[c].x += 32;
                }
            }
        }
    } else {
        for (int i = 0; i < blocks; i++) {
            #pragma GCC unroll 4
            for (int c = 0; c < rows; c++) {
                block_into(type, raw + c * row_bytes + i * BLOCK_BYTES[type], &s[c]);
                s[c].x += BLOCK_WEIGHTS[type];
            }
        }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < rows; c++)
        #pragma GCC unroll 8
        for (int r = 0; r < xrows; r++) y[(size_t)r * ld + c] = v_sum(s[c].acc[r]);
}

/* weight rows a fused tile of xrows x rows takes at once: its accumulators fill the registers */
static inline int fused_width(int xrows) { return xrows > 4 ? 2 : COL_TILE; }

/* dot_rows of a whole tile (rows == width) with both counts constants, or weight row by weight row */
#define DOT_FIXED(type_code, xrows, width) \
    if (rows == (width)) dot_rows(type_code, xrows, width, raw, row_bytes, K, x, y, ld); \
    else for (int c = 0; c < rows; c++) dot_rows(type_code, xrows, 1, raw + c * row_bytes, row_bytes, K, x, y + c, ld);

/* xrows (1, or where FUSED_ROWS allows 2, 4 or 8) x rows against `rows` (<= fused_width(xrows))
   weight rows: dot_rows with the type and the counts constants, so that the block decoding is
   inlined alone and no type is tested in the block loop */
typedef void (*dot_tile_function)(int xrows, int rows, const uint8_t *raw, size_t row_bytes, int K, const float *x,
                                  float *y, int ld);
#if FUSED_ROWS >= 8
#define DOT_MANY(type_code) \
    if (xrows == 8) { DOT_FIXED(type_code, 8, 2) } \
    else if (xrows == 4) { DOT_FIXED(type_code, 4, COL_TILE) } \
    else if (xrows == 2) { DOT_FIXED(type_code, 2, COL_TILE) } else
#else
#define DOT_MANY(type_code)
#endif
#define DOT_TYPED(name, type_code) \
    static void name(int xrows, int rows, const uint8_t *raw, size_t row_bytes, int K, const float *x, float *y, \
                     int ld) { \
        DOT_MANY(type_code) { DOT_FIXED(type_code, 1, COL_TILE) } \
    }
DOT_TYPED(dot_q8_0, Q8_0)
DOT_TYPED(dot_q4_0, Q4_0)
DOT_TYPED(dot_q4_1, Q4_1)
DOT_TYPED(dot_q5_0, Q5_0)
DOT_TYPED(dot_q5_1, Q5_1)
DOT_TYPED(dot_q4_k, Q4_K)
DOT_TYPED(dot_q5_k, Q5_K)
DOT_TYPED(dot_q6_k, Q6_K)

static dot_tile_function dot_tile(int type) {
    static const dot_tile_function by_type[] = {[Q8_0] = dot_q8_0, [Q4_0] = dot_q4_0, [Q4_1] = dot_q4_1,
        [Q4_K] = dot_q4_k, [Q5_K] = dot_q5_k, [Q6_K] = dot_q6_k, [Q5_0] = dot_q5_0, [Q5_1] = dot_q5_1};
    return by_type[type];
}

/* rows x cols outputs (rows <= ROW_TILE, cols <= COL_TILE); constant-folded where inlined */
static inline __attribute__((always_inline)) void tile(const float *x, int rows, const float *w, int cols,
                                                       int K, float *y, int N) {
    v16 acc[ROW_TILE][COL_TILE];
    #pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
        #pragma GCC unroll 4
        for (int c = 0; c < cols; c++) acc[r][c] = v_zero();
    for (int k = 0; k < K; k += 16) {
        #pragma GCC unroll 4
        for (int r = 0; r < rows; r++) {
            v16 xv = v_load(x + (size_t)r * K + k);
            #pragma GCC unroll 4
            for (int c = 0; c < cols; c++) acc[r][c] = v_fma(xv, v_load(w + (size_t)c * K + k), acc[r][c]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) y[(size_t)r * N + c] = v_sum(acc[r][c]);
}

static void full_tile(const float *x, int rows, const float *w, int K, float *y, int N) {
    switch (rows) {
#if ROW_TILE == 4
        case 4: tile(x, 4, w, COL_TILE, K, y, N); break;
        case 3: tile(x, 3, w, COL_TILE, K, y, N); break;
        case 2: tile(x, 2, w, COL_TILE, K, y, N); break;
#endif
        default: tile(x, 1, w, COL_TILE, K, y, N); break;
    }
}

/* x [M][K] against `cols` dequantized weight rows w: each ROW_TILE of x rows stays in L1 while it
   runs over all of them, COL_TILE at a time */
static void column_tile(const float *x, int M, const float *w, int cols, int K, float *y, int N) {
    for (int m = 0; m < M; m += ROW_TILE) {
        int rows = M - m < ROW_TILE ? M - m : ROW_TILE;
        const float *xm = x + (size_t)m * K;
        float *ym = y + (size_t)m * N;
        for (int c = 0; c < cols; c += COL_TILE) {
            if (cols - c >= COL_TILE) full_tile(xm, rows, w + (size_t)c * K, K, ym + c, N);
            else
                for (int r = 0; r < rows; r++)
                    for (int n = c; n < cols; n++)
                        tile(xm + (size_t)r * K, 1, w + (size_t)n * K, 1, K, ym + (size_t)r * N + n, N);
        }
    }
}

#endif
