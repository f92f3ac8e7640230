/* The q8i arithmetic of the native layer, for every GGUF block type it reads (Q8_0, Q4_0, Q4_1,
   Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): int8 activations against the weights' own integer quants,
   repacked at load so that one AVX-512 VNNI instruction serves 16 output rows at once.

     x row, per block of 32 (as ggml's quantize_row_q8_1_ref): amax = max |x|, dx = amax / 127,
         q = roundf(x * (dx ? 1 / dx : 0)) clamped to +-127, sx = dx * (float)sum(q)
     weight block of 32 of a row (the K-quants' sub-blocks of 32 taken as blocks): unsigned quants
         u (Q8_0 q + 128, Q4 0..15, Q5 0..31, Q6_K 0..63), offset o (Q8_0 128, Q4_0 8, Q5_0 16,
         Q6_K 32, else 0), scale dw (d; Q4_K / Q5_K d * sc; Q6_K d * scale, one for each half of
         16), min mw (Q4_1 / Q5_1 m; Q4_K / Q5_K -(dmin * mn); else none), each as ggml's
         dequantization rounds it to fp32
     s      = sum(u * q) - o * sum(q)                    exact, int32 (Q6_K: one s for each half)
     acc    = fma(dw * dx, (float)s, acc) over the blocks in order (Q6_K: the low half, then the
              high), from 0
     mins   = fma(mw, sx, mins) over the blocks in order, from 0 (types with a min)
     y      = acc + mins, or acc

   Each output depends on its x row and weight row alone, in a fixed order: nothing depends on the
   batch, the row's place or the threads, and the AVX-512 VNNI path (q8i_vnni.h), the AVX2 one
   (q8i_avx2.h) and the plain C one here give the same bits.

   Packed layout, the file's bytes in another order (Q4_K's and Q5_K's 6-bit scales and mins widened
   to bytes: 4 bytes more a row and super-block, 1/36 of a Q4_K block; fp16 scales as the file holds
   them, converted per use): the rows in
   groups of 16 (the last padded with zeros), each group its blocks in order, the K-quants' in units
   of a super-block: a header, fp16 d[16] and (Q4_K, Q5_K) dmin[16] of its rows, then its 8 blocks.
   A block (group, b):
     scales: fp16 d[16] and (Q4_1, Q5_1) m[16]; Q4_K / Q5_K u8 sc[16], mn[16]; Q6_K int8 scale[16]
            of the low half, scale[16] of the high half;
     Q8_0: u8 w[8][64], quad t's dword r = row r's u[4t..4t+3];
     else: u8 nib[4][64], byte 4r + j of nib[t] = row r's u[4t + j] & 15 | (u[16 + 4t + j] & 15) << 4;
     Q5 types, Q6_K: u64 bit4[8], bit 4r + j of bit4[t] = bit 4 of row r's u[4t + j];
     Q6_K: u64 bit5[8], the same for bit 5. */
#ifndef KVGATE_Q8I_H
#define KVGATE_Q8I_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kquant_blocks.h"
#include "kquant_half.h"
#include "q8i_layout.h"
#include "q8i_quantize.h"
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include "q8i_vnni.h"
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "q8i_avx2.h"
#endif

/* block b (of 32 weights) of a raw row: its unsigned quants, and row r's scale bytes written where
   the layout keeps them (header: the K-quants' super-block header, block: the packed block) */
static void q8i_source(int type, const uint8_t *row, int b, int r, uint8_t u[32], uint8_t *header, uint8_t *block) {
    const uint8_t *src = row + (size_t)(b * 32 / BLOCK_WEIGHTS[type]) * BLOCK_BYTES[type];
    int j = b % 8, sc, mn;
    if (type == Q8_0 || type == Q4_0 || type == Q4_1 || type == Q5_0 || type == Q5_1) {
        int min = type == Q4_1 || type == Q5_1, wide = type == Q5_0 || type == Q5_1;
        memcpy(block + 2 * r, src, 2);
        if (min) memcpy(block + 32 + 2 * r, src + 2, 2);
        const uint8_t *qh = src + 2 + 2 * min, *q = qh + 4 * wide;
        uint32_t high = wide ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24 : 0;
        for (int k = 0; k < 32; k++)
            u[k] = type == Q8_0 ? (uint8_t)(src[2 + k] ^ 0x80)
                                : (uint8_t)((k < 16 ? q[k] & 15 : q[k - 16] >> 4) | (high >> k & 1) << 4);
    } else if (type == Q4_K || type == Q5_K) {
        const uint8_t *qh = src + 16, *q = src + 16 + 32 * (type == Q5_K);
        memcpy(header + 2 * r, src, 2);
        memcpy(header + 32 + 2 * r, src + 2, 2);
        scale_min(src + 4, j, &sc, &mn);
        block[r] = (uint8_t)sc;
        block[16 + r] = (uint8_t)mn;
        for (int l = 0; l < 32; l++)
            u[l] = (uint8_t)((q[32 * (j / 2) + l] >> 4 * (j % 2) & 15) | (type == Q5_K ? (qh[l] >> j & 1) << 4 : 0));
    } else {  /* Q6_K: elements 128h + 32g + l */
        int h = j / 4, g = j % 4;
        const uint8_t *ql = src, *qh = src + 128;
        memcpy(header + 2 * r, src + 208, 2);
        block[r] = src[192 + 2 * j];
        block[16 + r] = src[192 + 2 * j + 1];
        for (int l = 0; l < 32; l++)
            u[l] = (uint8_t)((ql[64 * h + 32 * (g & 1) + l] >> 4 * (g / 2) & 15) | (qh[32 * h + l] >> 2 * g & 3) << 4);
    }
}

/* raw [N][row_bytes] GGUF blocks -> out (q8i_packed_bytes), the layout above */
static void q8i_repack_into(const uint8_t *raw, uint8_t *out, int N, int K, int type) {
    int blocks = K / 32, planes = q8i_planes(type);
    size_t row_bytes = (size_t)(K / BLOCK_WEIGHTS[type]) * BLOCK_BYTES[type], group_bytes = q8i_group_bytes(type, K);
    memset(out, 0, q8i_packed_bytes(type, N, K));
    for (int n = 0; n < N; n++) {
        int r = n % Q8I_GROUP;
        uint8_t *group = out + (size_t)(n / Q8I_GROUP) * group_bytes;
        for (int b = 0; b < blocks; b++) {
            uint8_t *header = (uint8_t *)q8i_header(type, group, b), *block = (uint8_t *)q8i_block(type, group, b), u[32];
            q8i_source(type, raw + n * row_bytes, b, r, u, header, block);
            uint8_t *quants = block + q8i_scale_bytes(type);
            for (int k = 0; k < 32; k++) {
                if (type == Q8_0) {
                    quants[64 * (k / 4) + 4 * r + k % 4] = u[k];
                    continue;
                }
                quants[64 * (k % 16 / 4) + 4 * r + k % 4] |= (uint8_t)((u[k] & 15) << 4 * (k >= 16));
                for (int p = 0; p < planes; p++) {
                    uint64_t *plane = (uint64_t *)(quants + 256 + 64 * p);
                    if (u[k] >> (4 + p) & 1) plane[k / 4] |= (uint64_t)1 << (4 * r + k % 4);
                }
            }
        }
    }
}

/* row n of a packed matrix dequantized to fp32 [K], bit for bit as ggml dequantizes its raw blocks
   (kquant_blocks.h: the same products and sums of the same fp32 values) */
static void q8i_dequantize_row(int type, const uint8_t *packed, int K, int n, float *out) {
    int blocks = K / 32, r = n % Q8I_GROUP, offset = q8i_offset(type);
    const uint8_t *group = packed + (size_t)(n / Q8I_GROUP) * q8i_group_bytes(type, K);
    for (int b = 0; b < blocks; b++, out += 32) {
        const uint8_t *quants = q8i_quants(type, q8i_block(type, group, b));
        float d, second;
        q8i_row_scales(type, group, b, r, &d, &second);
        for (int k = 0; k < 32; k++) {
            float q = (float)(q8i_quant(type, quants, r, k) - offset);  /* exact */
            out[k] = q8i_has_min(type) ? d * q + second : type == Q6_K && k >= 16 ? second * q : d * q;
        }
    }
}

/* the definition, one output at a time: rows x rows of a group (its first `valid` outputs) */
static void q8i_group_plain(int type, const uint8_t *group, const q8i_x *x, int rows, int blocks, float *y, int ld,
                            int valid) {
    int min = q8i_has_min(type), offset = q8i_offset(type), halves = type == Q6_K ? 2 : 1;
    for (int m = 0; m < rows; m++)
        for (int r = 0; r < valid; r++) {
            float acc = 0.0f, mins = 0.0f;
            for (int b = 0; b < blocks; b++) {
                const uint8_t *quants = q8i_quants(type, q8i_block(type, group, b));
                const q8i_x *xb = x + (size_t)m * blocks + b;
                float scales[2];
                q8i_row_scales(type, group, b, r, &scales[0], &scales[1]);
                for (int half = 0; half < halves; half++) {
                    int first = halves == 2 ? 16 * half : 0, count = 32 / halves;
                    int qsum = halves == 1 ? xb->qsum : half ? xb->qsum - xb->qsum_low : xb->qsum_low;
                    int32_t s = -offset * qsum;
                    for (int k = first; k < first + count; k++) s += q8i_quant(type, quants, r, k) * xb->q[k];
                    acc = fmaf(scales[half] * xb->d, (float)s, acc);
                }
                if (min) mins = fmaf(scales[1], xb->sum, mins);
            }
            y[(size_t)m * ld + r] = min ? acc + mins : acc;
        }
}

#ifdef Q8I_TILE
#define Q8I_REST(n) ((n) < Q8I_TILE ? (n) : 1) /* a remainder's tile: n, where fewer than Q8I_TILE rows can remain */
/* every x row against a group, Q8I_TILE rows at a time, the type a constant so that its decoding is
   inlined alone */
#define Q8I_TYPED(name, type_code) \
    static void name(const uint8_t *group, const q8i_x *x, int rows, int blocks, float *y, int ld, int valid) { \
        int m = 0; \
        for (; m + Q8I_TILE <= rows; m += Q8I_TILE) \
            q8i_tile(type_code, Q8I_TILE, group, x + (size_t)m * blocks, blocks, y + (size_t)m * ld, ld, valid); \
        switch (rows - m) { \
        case 7: q8i_tile(type_code, Q8I_REST(7), group, x + (size_t)m * blocks, blocks, y + (size_t)m * ld, ld, valid); break; \
        case 6: q8i_tile(type_code, Q8I_REST(6), group, x + (size_t)m * blocks, blocks, y + (size_t)m * ld, ld, valid); break; \
        case 5: q8i_tile(type_code, Q8I_REST(5), group, x + (size_t)m * blocks, blocks, y + (size_t)m * ld, ld, valid); break; \
        case 4: q8i_tile(type_code, Q8I_REST(4), group, x + (size_t)m * blocks, blocks, y + (size_t)m * ld, ld, valid); break; \
        case 3: q8i_tile(type_code, Q8I_REST(3), group, x + (size_t)m * blocks, blocks, y + (size_t)m * ld, ld, valid); break; \
        case 2: q8i_tile(type_code, Q8I_REST(2), group, x + (size_t)m * blocks, blocks, y + (size_t)m * ld, ld, valid); break; \
        case 1: q8i_tile(type_code, Q8I_REST(1), group, x + (size_t)m * blocks, blocks, y + (size_t)m * ld, ld, valid); break; \
        } \
    }
Q8I_TYPED(q8i_group_q8_0, Q8_0)
Q8I_TYPED(q8i_group_q4_0, Q4_0)
Q8I_TYPED(q8i_group_q4_1, Q4_1)
Q8I_TYPED(q8i_group_q5_0, Q5_0)
Q8I_TYPED(q8i_group_q5_1, Q5_1)
Q8I_TYPED(q8i_group_q4_k, Q4_K)
Q8I_TYPED(q8i_group_q5_k, Q5_K)
Q8I_TYPED(q8i_group_q6_k, Q6_K)
#endif

/* one group's outputs for every x row: the vector path where built, else the plain definition */
static void q8i_group(int type, const uint8_t *group, const q8i_x *x, int rows, int blocks, float *y, int ld,
                      int valid) {
#ifdef Q8I_TILE
    switch (type) {
    case Q8_0: q8i_group_q8_0(group, x, rows, blocks, y, ld, valid); return;
    case Q4_0: q8i_group_q4_0(group, x, rows, blocks, y, ld, valid); return;
    case Q4_1: q8i_group_q4_1(group, x, rows, blocks, y, ld, valid); return;
    case Q5_0: q8i_group_q5_0(group, x, rows, blocks, y, ld, valid); return;
    case Q5_1: q8i_group_q5_1(group, x, rows, blocks, y, ld, valid); return;
    case Q4_K: q8i_group_q4_k(group, x, rows, blocks, y, ld, valid); return;
    case Q5_K: q8i_group_q5_k(group, x, rows, blocks, y, ld, valid); return;
    case Q6_K: q8i_group_q6_k(group, x, rows, blocks, y, ld, valid); return;
    }
#endif
    q8i_group_plain(type, group, x, rows, blocks, y, ld, valid);
}

/* y [M][ld] columns 0..N-1 = the q8i products of x blocks [M][K / 32] with packed [N] rows */
static void q8i_matmul_into(const q8i_x *x, const uint8_t *packed, float *y, int M, int N, int K, int ld, int type,
                            int threads) {
    int blocks = K / 32, groups = (N + Q8I_GROUP - 1) / Q8I_GROUP;
    size_t group_bytes = q8i_group_bytes(type, K);
#pragma omp parallel for schedule(static) num_threads(threads) if ((long)N * K * M >= 65536)
    for (int g = 0; g < groups; g++) {
        int valid = N - g * Q8I_GROUP < Q8I_GROUP ? N - g * Q8I_GROUP : Q8I_GROUP;
        q8i_group(type, packed + g * group_bytes, x, M, blocks, y + g * Q8I_GROUP, ld, valid);
    }
}
#endif
