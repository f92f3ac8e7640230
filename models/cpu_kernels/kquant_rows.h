/* The two ways kquant runs weight rows against x rows: decoded straight into the dot product
   (dot_rows, one x row), or dequantized once into an fp32 buffer that tiles of x rows then share
   (dequantize_row + column_tile). Both feed each lane the same fma chain (kquant_vec.h). */
#ifndef KVGATE_KQUANT_ROWS_H
#define KVGATE_KQUANT_ROWS_H
#include <stddef.h>
#include <stdint.h>

#include "kquant_blocks.h"

#define COL_TILE 4

/* one weight row of K values from its blocks */
static void dequantize_row(int type, const uint8_t *row, int K, float *w) {
    sink s = {0, w, NULL, v_zero()};
    for (int i = 0; i < K / BLOCK_WEIGHTS[type]; i++, s.w += BLOCK_WEIGHTS[type])
        block_into(type, row + i * BLOCK_BYTES[type], &s);
}

/* x . `rows` (<= COL_TILE) weight rows (row_bytes apart) into y, weights decoded on the fly; the
   rows go block by block side by side so that their fma chains overlap */
INLINE void dot_rows(int type, int rows, const uint8_t *raw, size_t row_bytes, int K, const float *x, float *y) {
    sink s[COL_TILE];
    #pragma GCC unroll 4
    for (int r = 0; r < rows; r++) s[r] = (sink){1, NULL, x, v_zero()};
    for (int i = 0; i < K / BLOCK_WEIGHTS[type]; i++) {
        #pragma GCC unroll 4
        for (int r = 0; r < rows; r++) {
            block_into(type, raw + r * row_bytes + i * BLOCK_BYTES[type], &s[r]);
            s[r].x += BLOCK_WEIGHTS[type];
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < rows; r++) y[r] = v_sum(s[r].acc);
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
