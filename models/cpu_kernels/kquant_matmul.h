/* y = x @ W.T for W a matrix of raw GGUF blocks (kquant_blocks.h), kvgate's own arithmetic:

     w      = each weight dequantized to fp32 as ggml does it
     lane l = fma over k = l, l + 16, l + 32, ... in order of x[m, k] * w[n, k], from 0
     y[m,n] = the 16 lanes added as a fixed tree (kquant_vec.h)

   Nothing in it depends on M, on a row's place in the call or on the thread count, and every
   build (scalar, AVX2, AVX-512) gives the same bits. Threads split the output columns into tiles
   of weight rows, or panels of PANEL_ROWS (OpenMP, static schedule, on torch's runtime).
   - Up to FUSED_ROWS x rows (8 with AVX-512, else 1: a decode step): each 16 weights are decoded
     into a register and used at once by every x row (kquant_rows.h), so the packed weights stream
     through once and never as fp32.
   - More rows (a prefill): a thread dequantizes a panel of PANEL_ROWS weight rows once into its own
     fp32 buffer (it stays in L2) and runs every x row over it, ROW_TILE rows by COL_TILE weight
     rows at a time, so a long prefill's x streams through once a panel, not once every COL_TILE
     weight rows.
   Used by kquant.c (the per-projection matmul of torch's path; the native layer runs q8i.h). */
#ifndef KVGATE_KQUANT_MATMUL_H
#define KVGATE_KQUANT_MATMUL_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kquant_rows.h"
#include "kquant_q8a_rows.h"

#define PANEL_ROWS 32 /* weight rows dequantized at once for many x rows: 32 x 1,536 fp32 is 196 KB */

/* x rows in one fused tile of 1, 2, 4 or 8 (FUSED_ROWS) rows against every weight row */
static void fused_rows(const float *x, const uint8_t *raw, float *y, int xrows, int N, int K, int ld, int type,
                       int threads, size_t row_bytes) {
    dot_tile_function dot = dot_tile(type);
    int width = fused_width(xrows), tiles = (N + width - 1) / width;
#pragma omp parallel for schedule(static) num_threads(threads) if ((long)N * K >= 65536)
    for (int t = 0; t < tiles; t++) {
        int first = t * width;
        dot(xrows, N - first < width ? N - first : width, raw + first * row_bytes, row_bytes, K, x, y + first, ld);
    }
}

/* M <= FUSED_ROWS x rows: the weights are decoded once and used by every row (no fp32 copy of them);
   a count other than 1, 2, 4 or 8 runs as the next of those, the extra x rows zeros and their
   outputs dropped. 0, or -1 where a buffer could not be had */
static int fused_matmul(const float *x, const uint8_t *raw, float *y, int M, int N, int K, int ld, int type,
                        int threads, size_t row_bytes) {
    int xrows = M <= 2 ? M : M <= 4 ? 4 : 8;
    if (xrows == M) {
        fused_rows(x, raw, y, M, N, K, ld, type, threads, row_bytes);
        return 0;
    }
    float *padded = calloc((size_t)xrows * K + (size_t)xrows * N, sizeof(float)), *out = padded + (size_t)xrows * K;
    if (!padded) return -1;
    memcpy(padded, x, sizeof(float) * (size_t)M * K);
    fused_rows(padded, raw, out, xrows, N, K, N, type, threads, row_bytes);
    for (int m = 0; m < M; m++) memcpy(y + (size_t)m * ld, out + (size_t)m * N, sizeof(float) * N);
    free(padded);
    return 0;
}

/* x fp32 [M][K], raw [N][row_bytes] blocks of `type`, y fp32 [M][ld] (columns 0..N-1 written); K a
   multiple of the block; returns 0, or -1 where a buffer could not be had */
static int kquant_matmul_into(const float *x, const uint8_t *raw, float *y, int M, int N, int K, int ld, int type,
                              int threads) {
    size_t row_bytes = (size_t)(K / BLOCK_WEIGHTS[type]) * BLOCK_BYTES[type];
    int failed = 0;
    if (M <= FUSED_ROWS) return fused_matmul(x, raw, y, M, N, K, ld, type, threads, row_bytes);
    int panels = (N + PANEL_ROWS - 1) / PANEL_ROWS;
#pragma omp parallel num_threads(threads) if ((long)N * K >= 65536) reduction(| : failed)
    {
        float *w = aligned_alloc(64, sizeof(float) * PANEL_ROWS * (size_t)K);
        failed = w == NULL;
#pragma omp for schedule(static)
        for (int t = 0; t < panels; t++) {
            int first = t * PANEL_ROWS, cols = N - first < PANEL_ROWS ? N - first : PANEL_ROWS;
            if (!w) continue;
            for (int c = 0; c < cols; c++) dequantize_row(type, raw + (first + c) * row_bytes, K, w + (size_t)c * K);
            column_tile(x, M, w, cols, K, y + first, ld);
        }
        free(w);
    }
    return failed ? -1 : 0;
}

/* the q8a arithmetic (kquant_q8a.h): arguments as kquant_matmul_into with ld = N; returns 0, or -1
   where no buffer could be had */
static int kquant_q8a_matmul_into(const float *x, const uint8_t *raw, float *y, int M, int N, int K, int type,
                                  int threads) {
    int blocks = K / 32, tiles = (N + COL_TILE - 1) / COL_TILE, failed = 0;
    size_t row_bytes = (size_t)(K / BLOCK_WEIGHTS[type]) * BLOCK_BYTES[type];
    q8a_tile_function run = q8a_tile(type);
    xblock *xq = malloc(sizeof(xblock) * (size_t)M * blocks);
    if (!xq) return -1;
    for (int m = 0; m < M; m++) quantize_x_row(x + (size_t)m * K, K, xq + (size_t)m * blocks);
#pragma omp parallel num_threads(threads) if ((long)N * K * M >= 65536) reduction(| : failed)
    {
        wblock *buffer = M > 1 ? aligned_alloc(64, Q8A_BUFFER_BYTES(blocks)) : NULL;  /* whole 64s, as it needs */
        failed = M > 1 && !buffer;
#pragma omp for schedule(static)
        for (int t = 0; t < tiles; t++) {
            int first = t * COL_TILE, cols = N - first < COL_TILE ? N - first : COL_TILE;
            if (!failed) run(raw + first * row_bytes, row_bytes, cols, xq, M, blocks, y + first, N, buffer);
        }
        free(buffer);
    }
    free(xq);
    return failed ? -1 : 0;
}
#endif
