/* How the q8a arithmetic (kquant_q8a.h) runs weight rows against quantized x rows: one x row reads
   each block straight from the packed weights; more rows decode a tile of COL_TILE weight rows once
   into a thread's buffer (it stays in L1/L2: wblocks, or with AVX-512 VNNI the column pairs of
   kquant_q8a_wide.h) and run every x row over it, Q8A_ROW_TILE rows at a time. */
#ifndef KVGATE_KQUANT_Q8A_ROWS_H
#define KVGATE_KQUANT_Q8A_ROWS_H
#include <stddef.h>
#include <stdint.h>

#include "kquant_q8a.h"
#include "kquant_q8a_wide.h"
#include "kquant_rows.h"

#ifndef Q8A_WIDE
#define Q8A_BUFFER_BYTES(blocks) ((sizeof(wblock) * COL_TILE * (size_t)(blocks) + 63) / 64 * 64)
#endif

/* rows (<= Q8A_ROW_TILE) x cols (<= COL_TILE) outputs side by side, so that their fma chains overlap
   and each weight block serves every row: each output's lanes += (dw * dx) * lane sums over the
   blocks in order, the 8 lanes as a tree, then (where the type has a min) plus the min terms
   mw * x.sum, added in order of blocks from 0. Weights from `decoded` (wblocks [cols][blocks])
   where it is given, else from raw; x [rows][blocks], y [rows][N]. */
INLINE void q8a_dots(int type, int rows, int cols, const uint8_t *raw, size_t row_bytes, const wblock *decoded,
                     const xblock *x, int blocks, float *y, int N) {
    int with_min = type == Q4_1 || type == Q5_1 || type == Q4_K || type == Q5_K;
    f8 lanes[Q8A_ROW_TILE][COL_TILE];
    float mins[Q8A_ROW_TILE][COL_TILE];
    #pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
        #pragma GCC unroll 4
        for (int c = 0; c < cols; c++) { lanes[r][c] = f8_zero(); mins[r][c] = 0.0f; }
    for (int b = 0; b < blocks; b++) {
        if (!decoded)  /* the next tile's bytes, a line a block: the packed weights stream in ahead of use */
            __builtin_prefetch(raw + (size_t)COL_TILE * row_bytes + (size_t)b * COL_TILE * row_bytes / blocks);
        #pragma GCC unroll 4
        for (int c = 0; c < cols; c++) {
            wblock wb = decoded ? decoded[(size_t)c * blocks + b] : read_block(type, raw + c * row_bytes, b);
            #pragma GCC unroll 4
            for (int r = 0; r < rows; r++) {
                const xblock *xb = x + (size_t)r * blocks + b;
                b32 xq = b32_load(xb->q);
                i8l sums = type == Q8_0 ? dot_signed(wb.w, xq)
                           : type == Q4_0 ? dot_unsigned_from(i8l_load(xb->minus8), wb.w, xq)
                           : type == Q5_0 ? dot_unsigned_from(i8l_load(xb->minus16), wb.w, xq)
                           : type == Q6_K ? dot_unsigned_from(i8l_load(xb->minus32), wb.w, xq)
                                          : dot_unsigned(wb.w, xq);
                lanes[r][c] = type == Q6_K ? f8_fma2(wb.d * xb->d, wb.d_high * xb->d, sums, lanes[r][c])
                                           : f8_fma(wb.d * xb->d, sums, lanes[r][c]);
                if (with_min) mins[r][c] = fmaf(wb.m, xb->sum, mins[r][c]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
        #pragma GCC unroll 4
        for (int c = 0; c < cols; c++) y[(size_t)r * N + c] = f8_sum(lanes[r][c]) + mins[r][c];
}

#ifdef Q8A_WIDE  /* full tiles on the pairs of kquant_q8a_wide.h; what is left (m rows done) as below */
#define Q8A_WIDE_ROWS(type_code) \
    if (cols == COL_TILE) { \
        wpair *pairs = (wpair *)buffer; \
        for (int p = 0; p < COL_TILE / 2; p++) \
            for (int b = 0; b < blocks; b++) \
                pairs[(size_t)p * blocks + b] = read_pair(type_code, raw + 2 * p * row_bytes, row_bytes, b); \
        for (; m + Q8A_ROW_TILE <= rows; m += Q8A_ROW_TILE) \
            q8a_wide_dots(type_code, Q8A_ROW_TILE, pairs, x + (size_t)m * blocks, blocks, y + (size_t)m * N, N); \
        for (; m < rows; m++) q8a_wide_dots(type_code, 1, pairs, x + (size_t)m * blocks, blocks, y + (size_t)m * N, N); \
        return; \
    }
#else
#define Q8A_WIDE_ROWS(type_code)
#endif

/* x blocks of `rows` x rows against `cols` weight rows (row_bytes apart) into y [rows][N]; the type
   a constant, so that its block decoding is inlined alone; buffer: COL_TILE * blocks wblocks */
#define Q8A_TYPED(name, type_code) \
    static void name(const uint8_t *raw, size_t row_bytes, int cols, const xblock *x, int rows, int blocks, \
                     float *y, int N, wblock *buffer) { \
        if (rows == 1) { \
            if (cols == COL_TILE) q8a_dots(type_code, 1, COL_TILE, raw, row_bytes, NULL, x, blocks, y, N); \
            else for (int c = 0; c < cols; c++) \
                q8a_dots(type_code, 1, 1, raw + c * row_bytes, row_bytes, NULL, x, blocks, y + c, N); \
            return; \
        } \
        int m = 0; \
        Q8A_WIDE_ROWS(type_code) \
        for (int c = 0; c < cols; c++) \
            for (int b = 0; b < blocks; b++) buffer[(size_t)c * blocks + b] = read_block(type_code, raw + c * row_bytes, b); \
        if (cols == COL_TILE) \
            for (; m + Q8A_ROW_TILE <= rows; m += Q8A_ROW_TILE) \
                q8a_dots(type_code, Q8A_ROW_TILE, COL_TILE, NULL, 0, buffer, x + (size_t)m * blocks, blocks, \
                         y + (size_t)m * N, N); \
        for (; m < rows; m++) \
            for (int c = 0; c < cols; c++) \
                q8a_dots(type_code, 1, 1, NULL, 0, buffer + (size_t)c * blocks, x + (size_t)m * blocks, blocks, \
                         y + (size_t)m * N + c, N); \
    }
Q8A_TYPED(q8a_q8_0, Q8_0)
Q8A_TYPED(q8a_q4_0, Q4_0)
Q8A_TYPED(q8a_q4_1, Q4_1)
Q8A_TYPED(q8a_q5_0, Q5_0)
Q8A_TYPED(q8a_q5_1, Q5_1)
Q8A_TYPED(q8a_q4_k, Q4_K)
Q8A_TYPED(q8a_q5_k, Q5_K)
Q8A_TYPED(q8a_q6_k, Q6_K)

typedef void (*q8a_tile_function)(const uint8_t *, size_t, int, const xblock *, int, int, float *, int, wblock *);

static q8a_tile_function q8a_tile(int type) {
    static const q8a_tile_function by_type[] = {[Q8_0] = q8a_q8_0, [Q4_0] = q8a_q4_0, [Q4_1] = q8a_q4_1,
        [Q4_K] = q8a_q4_k, [Q5_K] = q8a_q5_k, [Q6_K] = q8a_q6_k, [Q5_0] = q8a_q5_0, [Q5_1] = q8a_q5_1};
    return by_type[type];
}
#endif
