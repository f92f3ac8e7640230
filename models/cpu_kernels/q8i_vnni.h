/* q8i's group of 16 outputs with AVX-512 VNNI: one vpdpbusd takes a quad of 4 quants of all 16
   rows (q8i.h's layout) against 4 int8 x values, so every output's block sum is exact int32 in a
   lane, scaled and accumulated as q8i.h defines it. */
#ifndef KVGATE_Q8I_VNNI_H
#define KVGATE_Q8I_VNNI_H
#include <immintrin.h>

#include "q8i_layout.h"

#define Q8I_TILE 8 /* x rows a decoded block serves at once */

/* the 8 quads of a packed block's quants, unsigned bytes, dword r row r's */
Q8I_INLINE void q8i_unpack(int type, const uint8_t *quants, __m512i w[8]) {
    if (type == Q8_0) {
        for (int t = 0; t < 8; t++) w[t] = _mm512_loadu_si512(quants + 64 * t);
        return;
    }
    const __m512i low = _mm512_set1_epi8(15);
    for (int t = 0; t < 4; t++) {
        __m512i bytes = _mm512_loadu_si512(quants + 64 * t);
        w[t] = _mm512_and_si512(bytes, low);
        w[t + 4] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low);
    }
    for (int p = 0; p < q8i_planes(type); p++) {
        const __m512i bit = _mm512_set1_epi8((char)(16 << p));
        for (int t = 0; t < 8; t++) {
            uint64_t mask;
            memcpy(&mask, quants + 256 + 64 * p + 8 * t, 8);
            w[t] = _mm512_mask_add_epi8(w[t], _cvtu64_mask64(mask), w[t], bit);
        }
    }
}

/* 16 fp16 / u8 / int8 scales as fp32 lanes */
Q8I_INLINE __m512 q8i_halves16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
Q8I_INLINE __m512 q8i_u8_16(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
Q8I_INLINE __m512 q8i_i8_16(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* q8i_row_scales of all 16 rows (second: dw where the type has none) */
Q8I_INLINE void q8i_scales16(int type, const uint8_t *group, int b, __m512 *dw, __m512 *second) {
    const uint8_t *header = q8i_header(type, group, b), *block = q8i_block(type, group, b);
    if (type == Q4_K || type == Q5_K) {
        *dw = _mm512_mul_ps(q8i_halves16(header), q8i_u8_16(block));
        __m512 dmin = _mm512_mul_ps(q8i_halves16(header + 32), q8i_u8_16(block + 16));
        *second = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(dmin), _mm512_set1_epi32((int)0x80000000u)));
    } else if (type == Q6_K) {
        __m512 d = q8i_halves16(header);
        *dw = _mm512_mul_ps(d, q8i_i8_16(block));
        *second = _mm512_mul_ps(d, q8i_i8_16(block + 16));
    } else {
        *dw = q8i_halves16(block);
        *second = q8i_has_min(type) ? q8i_halves16(block + 32) : *dw;
    }
}

/* x's quad t (its q[4t..4t+3]) in every dword */
Q8I_INLINE __m512i q8i_quad(const q8i_x *xb, int t) {
    int32_t quad;
    memcpy(&quad, xb->q + 4 * t, 4);
    return _mm512_set1_epi32(quad);
}

/* `tile` x rows (a constant where inlined) against a group's 16 outputs */
Q8I_INLINE void q8i_tile(int type, int tile, const uint8_t *group, const q8i_x *x, int blocks, float *y, int ld,
                              int valid) {
    int min = q8i_has_min(type), offset = q8i_offset(type);
    __m512 acc[Q8I_TILE], mins[Q8I_TILE];
    #pragma GCC unroll 8
    for (int m = 0; m < tile; m++) acc[m] = mins[m] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const uint8_t *block = q8i_block(type, group, b);
        __m512 d, second;
        q8i_scales16(type, group, b, &d, &second);
        __m512i w[8];
        q8i_unpack(type, q8i_quants(type, block), w);
        #pragma GCC unroll 8
        for (int m = 0; m < tile; m++) {
            const q8i_x *xb = x + (size_t)m * blocks + b;
            __m512 dx = _mm512_set1_ps(xb->d);
            if (type == Q6_K) {
                __m512i low = _mm512_set1_epi32(-offset * xb->qsum_low);
                __m512i high = _mm512_set1_epi32(-offset * (xb->qsum - xb->qsum_low));
                #pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    low = _mm512_dpbusd_epi32(low, w[t], q8i_quad(xb, t));
                    high = _mm512_dpbusd_epi32(high, w[t + 4], q8i_quad(xb, t + 4));
                }
                acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(low), acc[m]);
                acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(second, dx), _mm512_cvtepi32_ps(high), acc[m]);
                continue;
            }
            __m512i s = _mm512_set1_epi32(-offset * xb->qsum);
            #pragma GCC unroll 8
            for (int t = 0; t < 8; t++) s = _mm512_dpbusd_epi32(s, w[t], q8i_quad(xb, t));
            acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(s), acc[m]);
            if (min) mins[m] = _mm512_fmadd_ps(second, _mm512_set1_ps(xb->sum), mins[m]);
        }
    }
    __mmask16 keep = (__mmask16)((1u << valid) - 1);
    #pragma GCC unroll 8
    for (int m = 0; m < tile; m++)
        _mm512_mask_storeu_ps(y + (size_t)m * ld, keep, min ? _mm512_add_ps(acc[m], mins[m]) : acc[m]);
}

#endif
