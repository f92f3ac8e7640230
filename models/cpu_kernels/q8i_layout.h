/* The q8i packed layout and quantized x rows (q8i.h's docstring defines both). */
#ifndef KVGATE_Q8I_LAYOUT_H
#define KVGATE_Q8I_LAYOUT_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kquant_blocks.h"
#include "kquant_half.h"

#define Q8I_INLINE static inline __attribute__((always_inline))
#define Q8I_GROUP 16

typedef struct { int8_t q[32]; float d, sum; int32_t qsum, qsum_low; } q8i_x;  /* qsum_low: of q[0..15] */

static inline int q8i_has_min(int type) { return type == Q4_1 || type == Q5_1 || type == Q4_K || type == Q5_K; }
static inline int q8i_offset(int type) {
    return type == Q8_0 ? 128 : type == Q4_0 ? 8 : type == Q5_0 ? 16 : type == Q6_K ? 32 : 0;
}
static inline int q8i_planes(int type) {  /* high-bit planes beside the nibbles */
    return type == Q6_K ? 2 : type == Q5_0 || type == Q5_1 || type == Q5_K;
}
static inline int q8i_kquant(int type) { return type == Q4_K || type == Q5_K || type == Q6_K; }
static inline int q8i_unit(int type) { return q8i_kquant(type) ? 8 : 1; }  /* blocks that share a header */
static inline size_t q8i_header_bytes(int type) { return type == Q6_K ? 32 : q8i_kquant(type) ? 64 : 0; }
static inline size_t q8i_scale_bytes(int type) { return type == Q4_1 || type == Q5_1 ? 64 : 32; }

static inline size_t q8i_block_bytes(int type) {
    return q8i_scale_bytes(type) + (type == Q8_0 ? 512 : 256) + 64 * q8i_planes(type);
}

static inline size_t q8i_unit_bytes(int type) { return q8i_header_bytes(type) + q8i_unit(type) * q8i_block_bytes(type); }

static inline size_t q8i_group_bytes(int type, int K) { return q8i_unit_bytes(type) * (size_t)(K / 32 / q8i_unit(type)); }

static inline size_t q8i_packed_bytes(int type, int N, int K) {
    return q8i_group_bytes(type, K) * (size_t)((N + Q8I_GROUP - 1) / Q8I_GROUP);
}

/* the header (K-quants) and the block of block b of a group, and a block's quants */
static inline const uint8_t *q8i_header(int type, const uint8_t *group, int b) {
    return group + (size_t)(b / q8i_unit(type)) * q8i_unit_bytes(type);
}
static inline const uint8_t *q8i_block(int type, const uint8_t *group, int b) {
    return q8i_header(type, group, b) + q8i_header_bytes(type) + (size_t)(b % q8i_unit(type)) * q8i_block_bytes(type);
}
static inline const uint8_t *q8i_quants(int type, const uint8_t *block) { return block + q8i_scale_bytes(type); }

/* row r's scale dw and second value (its min mw, Q6_K's high half's scale, else 0) for block b, each
   rounded as the definition says */
static inline void q8i_row_scales(int type, const uint8_t *group, int b, int r, float *dw, float *second) {
    const uint8_t *header = q8i_header(type, group, b), *block = q8i_block(type, group, b);
    if (type == Q4_K || type == Q5_K) {
        *dw = half_to_float(header + 2 * r) * (float)block[r];
        *second = -(half_to_float(header + 32 + 2 * r) * (float)block[16 + r]);
    } else if (type == Q6_K) {
        float d = half_to_float(header + 2 * r);
        *dw = d * (float)(int8_t)block[r];
        *second = d * (float)(int8_t)block[16 + r];
    } else {
        *dw = half_to_float(block + 2 * r);
        *second = q8i_has_min(type) ? half_to_float(block + 32 + 2 * r) : 0.0f;
    }
}

/* the unsigned quant of weight k of row r in a packed block's quants */
static inline int q8i_quant(int type, const uint8_t *quants, int r, int k) {
    if (type == Q8_0) return quants[64 * (k / 4) + 4 * r + k % 4];
    int t = k % 16 / 4, byte = quants[64 * t + 4 * r + k % 4];
    int u = k < 16 ? byte & 15 : byte >> 4;
    for (int p = 0; p < q8i_planes(type); p++) {
        uint64_t mask;
        memcpy(&mask, quants + 256 + 64 * p + 8 * (k / 4), 8);
        u |= (int)(mask >> (4 * r + k % 4) & 1) << (4 + p);
    }
    return u;
}

#endif
