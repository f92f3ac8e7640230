/* GGUF weight blocks dequantized to fp32 exactly as ggml (and gguf-py's `dequantize`) does it:
   the same products and sums in the same order, each rounded to fp32 (built with
   -ffp-contract=off, so no product is fused into a sum). Every operation is element-wise, so
   any vector width gives the same bits.

   Quants are widened to 32-bit lanes 16 at a time, their bits picked out, converted and scaled.

   Block layouts (bytes, little-endian fp16 scales):
     Q8_0 34:  d, int8 q[32]                                   w = q * d
     Q4_0 18:  d, q[16] nibbles (low: 0-15, high: 16-31)       w = d * (q - 8)
     Q4_1 20:  d, m, q[16] as Q4_0                             w = d * q + m
     Q5_0 22:  d, uint32 qh, q[16] as Q4_0, bit e of qh bit 4 of weight e     w = d * (q - 16)
     Q5_1 24:  d, m, qh, q[16] as Q5_0                         w = d * q + m
     Q4_K 144: d, dmin, scales[12] (8 6-bit scale/min pairs), q[128]: sub-block j of 32 is the
               low (j even) or high (j odd) nibbles of bytes 32*(j/2)..+32   w = (d*sc)*q - dmin*mn
     Q5_K 176: as Q4_K with qh[32] before q: bit j of qh[l] is bit 4 of sub-block j's weight l
     Q6_K 210: ql[128], qh[64], int8 scales[16], d; w = (d*scale[e/16]) * (q - 32), element
               e = 128h + 32g + l: low bits ql[64h + 32(g&1) + l] nibble g/2, high bits
               (qh[32h + l] >> 2g) & 3 */
#ifndef KVGATE_KQUANT_BLOCKS_H
#define KVGATE_KQUANT_BLOCKS_H
#include <stdint.h>
#include <string.h>

#include "kquant_half.h"
#include "kquant_vec.h"

enum { Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, Q5_0, Q5_1 };

/* Where a block's weights go, 16 at a time and strictly in order of k (each lane's fma chain
   depends on it): stored to w (dequantization into a buffer), or, where fused, straight into the
   lanes of the dot products with one or more x rows. Every block function is inlined into both uses, so the choice
   costs nothing. */
#if defined(__AVX512F__)
#define FUSED_ROWS 8 /* x rows one decoded weight vector serves at most: 8 rows x 2 weight rows of lanes */
#else
#define FUSED_ROWS 1
#endif
/* rows 0: stored to w; else fma'd into acc[r] with x row r (x + r * ld), for r < rows */
typedef struct { int rows; float *w; const float *x; int ld; v16 acc[FUSED_ROWS]; } sink;
#define INLINE static inline __attribute__((always_inline))

INLINE void put(sink *s, int offset, v16 weights) {
    if (!s->rows) v_store(s->w + offset, weights);
    #pragma GCC unroll 8
    for (int r = 0; r < s->rows; r++) s->acc[r] = v_fma(v_load(s->x + (size_t)r * s->ld + offset), weights, s->acc[r]);
}

/* The 32-weight blocks take their scale d (and min m) as fp32 arguments: read here with
   half_to_float, or for a run of blocks at once (kquant_rows.h's block_scales) */
INLINE void q8_0_block(const uint8_t *restrict b, float scale, sink *s) {
    v16 d = v_set1(scale);
    for (int i = 0; i < 32; i += 16) put(s, i, v_mul(v_i8((const int8_t *)b + 2 + i), d));
}

/* Q4_0's d * (q - 8), Q5_0's d * (q - 16), Q4_1's and Q5_1's d * q + m, the K-quants' d * q - m */
enum { D_Q_MINUS_8, D_Q_MINUS_16, D_Q_PLUS_M, D_Q_MINUS_M };

static inline v16 affine(int form, v16 d, v16 m, v16 q) {
    /* q - 8 and q - 16 are exact in fp32 */
    if (form == D_Q_MINUS_8) return v_mul(d, v_sub(q, v_set1(8.0f)));
    if (form == D_Q_MINUS_16) return v_mul(d, v_sub(q, v_set1(16.0f)));
    return form == D_Q_PLUS_M ? v_add(v_mul(d, q), m) : v_sub(v_mul(d, q), m);
}

/* 16 weights from quants q in 0..15 (0..31 where wide): the same operations either way */
INLINE void affine_put(sink *s, int offset, int form, float d, float m, v16i q, int wide) {
#ifdef V_LOOKUP
    v16 low = affine(form, v_set1(d), v_set1(m), v_iota(0.0f));
    put(s, offset, wide ? v_lookup2(low, affine(form, v_set1(d), v_set1(m), v_iota(16.0f)), q) : v_lookup(low, q));
#else
    (void)wide;
    put(s, offset, affine(form, v_set1(d), v_set1(m), v_int(q)));
#endif
}

#ifndef V_LOOKUP
static inline v16i vi_nibble(v16i bytes, int high) { return vi_bits(bytes, 4 * high, 15); }
#endif

/* Q4_0 when has_min is 0, else Q4_1 */
INLINE void q4_block(const uint8_t *restrict b, int has_min, float d, float m, sink *s) {
    v16i bytes = vi_u8(b + 2 + 2 * has_min);
    int form = has_min ? D_Q_PLUS_M : D_Q_MINUS_8;
    affine_put(s, 0, form, d, m, vi_nibble(bytes, 0), 0);
    affine_put(s, 16, form, d, m, vi_nibble(bytes, 1), 0);
}

/* Q5_0 when has_min is 0, else Q5_1 */
INLINE void q5_block(const uint8_t *restrict b, int has_min, float d, float m, sink *s) {
    const uint8_t *qh = b + 2 + 2 * has_min;
    uint32_t high = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    v16i bytes = vi_u8(qh + 4);
    int form = has_min ? D_Q_PLUS_M : D_Q_MINUS_16;
    for (int i = 0; i < 2; i++) affine_put(s, 16 * i, form, d, m, vi_bit4(i ? vi_high4(bytes) : vi_bits(bytes, 0, 15), high, 16 * i), 1);
}

/* the 6-bit scale and min of Q4_K/Q5_K sub-block j */
static inline void scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) { *sc = s[j] & 63; *mn = s[j + 4] & 63; }
    else { *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4); *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
}

/* Q4_K when qh is NULL, else Q5_K */
INLINE void k_block(const uint8_t *restrict b, const uint8_t *restrict qh, const uint8_t *restrict q, sink *s) {
    float d = half_to_float(b), dmin = half_to_float(b + 2), dsc[8], dmn[8];
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        scale_min(b + 4, j, &sc, &mn);
        dsc[j] = d * (float)sc;
        dmn[j] = dmin * (float)mn;
    }
    v16i high[2];
    if (qh) { high[0] = vi_u8(qh); high[1] = vi_u8(qh + 16); }
    for (int c = 0; c < 4; c++) {  /* sub-blocks 2c and 2c + 1 share their bytes: widen them once */
        v16i bytes[2] = {vi_u8(q + 32 * c), vi_u8(q + 32 * c + 16)};
        for (int j = 2 * c; j < 2 * c + 2; j++)
            for (int i = 0; i < 2; i++) {
                v16i quant = qh ? vi_or_shifted(vi_bits(bytes[i], 4 * (j % 2), 15), vi_bits(high[i], j, 1), 4)
                                : vi_nibble(bytes[i], j % 2);
                affine_put(s, 32 * j + 16 * i, D_Q_MINUS_M, dsc[j], dmn[j], quant, qh != NULL);
            }
    }
}

INLINE void q6_k_block(const uint8_t *restrict b, sink *s) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    float ds[16];  /* d * scale, 16 lanes at once */
    v_store(ds, v_mul(v_set1(half_to_float(b + 208)), v_i8(scales)));
    for (int h = 0; h < 2; h++) {  /* each byte widened once: ql serves two groups, qh four */
        v16i low[2][2], high[2];  /* [g & 1][i], [i] */
        for (int i = 0; i < 2; i++) {
            low[0][i] = vi_u8(ql + 64 * h + 16 * i);
            low[1][i] = vi_u8(ql + 64 * h + 32 + 16 * i);
            high[i] = vi_u8(qh + 32 * h + 16 * i);
        }
        for (int g = 0; g < 4; g++)
            for (int i = 0; i < 2; i++) {  /* in order of k, as the dot product takes them */
                v16i nibble = g / 2 ? vi_high4(low[g & 1][i]) : vi_bits(low[g & 1][i], 0, 15);
                v16i quant = vi_or_shifted(nibble, vi_bits(high[i], 2 * g, 3), 4);
                /* q - 32 is exact in fp32 */
                v16 weights = v_mul(v_set1(ds[8 * h + 2 * g + i]), v_sub(v_int(quant), v_set1(32.0f)));
                put(s, 128 * h + 32 * g + 16 * i, weights);
            }
    }
}

static const int BLOCK_WEIGHTS[] = {32, 32, 32, 256, 256, 256, 32, 32};
static const int BLOCK_BYTES[] = {34, 18, 20, 144, 176, 210, 22, 24};

/* whether a 32-weight type has a min after its scale (both fp16, at bytes 0 and 2) */
static inline int has_min(int type) { return type == Q4_1 || type == Q5_1; }

/* a 32-weight block with its scale and min already read */
INLINE void scaled_block_into(int type, const uint8_t *block, float d, float m, sink *s) {
    switch (type) {
        case Q8_0: q8_0_block(block, d, s); break;
        case Q4_0: q4_block(block, 0, d, m, s); break;
        case Q4_1: q4_block(block, 1, d, m, s); break;
        case Q5_0: q5_block(block, 0, d, m, s); break;
        default: q5_block(block, 1, d, m, s); break;
    }
}

INLINE void block_into(int type, const uint8_t *block, sink *s) {
    switch (type) {
        case Q4_K: k_block(block, NULL, block + 16, s); break;
        case Q5_K: k_block(block, block + 16, block + 48, s); break;
        case Q6_K: q6_k_block(block, s); break;
        default:
            scaled_block_into(type, block, half_to_float(block), has_min(type) ? half_to_float(block + 2) : 0.0f, s);
    }
}

#endif
