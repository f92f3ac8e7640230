/* The q8a arithmetic ("kquant1-q8a", kquant.py's docstring defines it): each x row quantized to
   int8 blocks of 32 (xblock), integer block dot products against the weights' own integer quants
   (kquant_q8a_vec.h), scaled per block into 8 fp32 lanes (kquant_q8a_rows.h). Every kquant type: the
   K-quants' sub-blocks of 32 are read as blocks (kquant_q8a_k.h). */
#ifndef KVGATE_KQUANT_Q8A_H
#define KVGATE_KQUANT_Q8A_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kquant_blocks.h"
#include "kquant_q8a_k.h"
#include "kquant_q8a_vec.h"
#include "q8i_quantize.h"

/* x ~ d * q; sum = d * (float)(sum of q); minus8/minus16: -8 and -16 times each lane's sum of q, so
   that Q4_0's and Q5_0's lane sums of (q - 8) * x are one unsigned dot product from them */
typedef struct { int8_t q[32]; int32_t minus8[8], minus16[8], minus32[8]; float d, sum; } xblock;

/* as ggml's quantize_row_q8_1_ref, q8i's rounding (q8i_quantize.h), plus the lane sums */
static void quantize_x_row(const float *x, int K, xblock *out) {
    for (int b = 0; b < K / 32; b++, x += 32) {
        q8i_x rounded;
        q8i_quantize_row_plain(x, 32, &rounded);
        memcpy(out[b].q, rounded.q, 32);
        for (int l = 0; l < 8; l++) {
            int lane = out[b].q[4 * l] + out[b].q[4 * l + 1] + out[b].q[4 * l + 2] + out[b].q[4 * l + 3];
            out[b].minus8[l] = -8 * lane;
            out[b].minus16[l] = -16 * lane;
            out[b].minus32[l] = -32 * lane;
        }
        out[b].d = rounded.d;
        out[b].sum = rounded.sum;
    }
}

/* the quants of a 32-block (Q4_0 and Q5_0 without their offsets of 8 and 16: the lane sums start from
   xblock's minus8 / minus16 instead) */
static inline b32 block_ints(int type, const uint8_t *b) {
    switch (type) {
        case Q8_0: return b32_load((const int8_t *)b + 2);
        case Q4_0: return b32_nibbles(b + 2);
        case Q4_1: return b32_nibbles(b + 4);
        default: {
            const uint8_t *qh = b + (type == Q5_0 ? 2 : 4);
            uint32_t high = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
            return b32_or(b32_nibbles(qh + 4), b32_bit4(high));
        }
    }
}

/* block b (of 32 weights) of a weight row */
INLINE wblock read_block(int type, const uint8_t *row, int b) {
    if (BLOCK_WEIGHTS[type] == 256) {
        const uint8_t *super = row + (size_t)(b / 8) * BLOCK_BYTES[type];
        return type == Q6_K ? q6_k_sub_block(super, b % 8) : k_sub_block(super, b % 8, type == Q5_K);
    }
    const uint8_t *block = row + (size_t)b * BLOCK_BYTES[type];
    float d = half_to_float(block);
    return (wblock){block_ints(type, block), d, d, type == Q4_1 || type == Q5_1 ? half_to_float(block + 2) : 0.0f};
}
#endif
