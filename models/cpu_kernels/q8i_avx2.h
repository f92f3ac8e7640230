/* q8i's group of 16 outputs with AVX2: each half of 8 rows in turn, a quad of 4 quants of its rows
   (q8i.h's layout) times 4 int8 x values by maddubs (pairs, never saturating: quants below 64, or
   Q8_0's signed ones times x with their sign) and madd (the 4 in one exact int32), scaled and
   accumulated as q8i.h defines it. */
#ifndef KVGATE_Q8I_AVX2_H
#define KVGATE_Q8I_AVX2_H
#include <immintrin.h>

#include "q8i_layout.h"

#define Q8I_TILE 4 /* x rows a decoded half-block serves at once */

/* 32 bits as 32 bytes of `value` where set, else 0 */
Q8I_INLINE __m256i q8i_bit_bytes(uint32_t bits, char value) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i select = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, select), select);
    return _mm256_and_si256(set, _mm256_set1_epi8(value));
}

/* the 8 quads of half h (rows 8h..8h+7) of a packed block's quants; Q8_0's as signed q */
Q8I_INLINE void q8i_unpack_half(int type, const uint8_t *quants, int h, __m256i w[8]) {
    if (type == Q8_0) {
        for (int t = 0; t < 8; t++)
            w[t] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(quants + 64 * t + 32 * h)),
                                    _mm256_set1_epi8((char)0x80));
        return;
    }
    const __m256i low = _mm256_set1_epi8(15);
    for (int t = 0; t < 4; t++) {
        __m256i bytes = _mm256_loadu_si256((const __m256i *)(quants + 64 * t + 32 * h));
        w[t] = _mm256_and_si256(bytes, low);
        w[t + 4] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
    }
    for (int p = 0; p < q8i_planes(type); p++)
        for (int t = 0; t < 8; t++) {
            uint64_t mask;
            memcpy(&mask, quants + 256 + 64 * p + 8 * t, 8);
            w[t] = _mm256_or_si256(w[t], q8i_bit_bytes((uint32_t)(mask >> 32 * h), (char)(16 << p)));
        }
}

/* 8 fp16 / u8 / int8 scales as fp32 lanes */
Q8I_INLINE __m256 q8i_halves8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
Q8I_INLINE __m256 q8i_u8_8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
Q8I_INLINE __m256 q8i_i8_8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* q8i_row_scales of rows 8h..8h+7 (second: dw where the type has none) */
Q8I_INLINE void q8i_scales8(int type, const uint8_t *group, int b, int h, __m256 *dw, __m256 *second) {
    const uint8_t *header = q8i_header(type, group, b), *block = q8i_block(type, group, b);
    if (type == Q4_K || type == Q5_K) {
        *dw = _mm256_mul_ps(q8i_halves8(header + 16 * h), q8i_u8_8(block + 8 * h));
        __m256 dmin = _mm256_mul_ps(q8i_halves8(header + 32 + 16 * h), q8i_u8_8(block + 16 + 8 * h));
        *second = _mm256_xor_ps(dmin, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
    } else if (type == Q6_K) {
        __m256 d = q8i_halves8(header + 16 * h);
        *dw = _mm256_mul_ps(d, q8i_i8_8(block + 8 * h));
        *second = _mm256_mul_ps(d, q8i_i8_8(block + 16 + 8 * h));
    } else {
        *dw = q8i_halves8(block + 16 * h);
        *second = q8i_has_min(type) ? q8i_halves8(block + 32 + 16 * h) : *dw;
    }
}

/* s + the quads first..first+count-1 of w times x's, exact int32 per row */
Q8I_INLINE __m256i q8i_dots(int type, const __m256i w[8], const q8i_x *xb, int first, int count, __m256i s) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int t = first; t < first + count; t++) {
        int32_t quad;
        memcpy(&quad, xb->q + 4 * t, 4);
        __m256i xq = _mm256_set1_epi32(quad);
        __m256i pairs = type == Q8_0 ? _mm256_maddubs_epi16(_mm256_sign_epi8(w[t], w[t]), _mm256_sign_epi8(xq, w[t]))
                                     : _mm256_maddubs_epi16(w[t], xq);
        s = _mm256_add_epi32(s, _mm256_madd_epi16(pairs, ones));
    }
    return s;
}

/* `tile` x rows against half h of a group's outputs (its first `valid` of 8) */
Q8I_INLINE void q8i_half(int type, int tile, const uint8_t *group, const q8i_x *x, int blocks, float *y, int ld, int h,
                         int valid) {
    int min = q8i_has_min(type), offset = type == Q8_0 ? 0 : q8i_offset(type);  /* Q8_0: signed q, no offset */
    __m256 acc[Q8I_TILE], mins[Q8I_TILE];
    for (int m = 0; m < tile; m++) acc[m] = mins[m] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        __m256 d, second;
        q8i_scales8(type, group, b, h, &d, &second);
        __m256i w[8];
        q8i_unpack_half(type, q8i_quants(type, q8i_block(type, group, b)), h, w);
        for (int m = 0; m < tile; m++) {
            const q8i_x *xb = x + (size_t)m * blocks + b;
            __m256 dx = _mm256_set1_ps(xb->d);
            if (type == Q6_K) {
                __m256i low = q8i_dots(type, w, xb, 0, 4, _mm256_set1_epi32(-offset * xb->qsum_low));
                __m256i high = q8i_dots(type, w, xb, 4, 4, _mm256_set1_epi32(-offset * (xb->qsum - xb->qsum_low)));
                acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(low), acc[m]);
                acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(second, dx), _mm256_cvtepi32_ps(high), acc[m]);
                continue;
            }
            __m256i s = q8i_dots(type, w, xb, 0, 8, _mm256_set1_epi32(-offset * xb->qsum));
            acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(s), acc[m]);
            if (min) mins[m] = _mm256_fmadd_ps(second, _mm256_set1_ps(xb->sum), mins[m]);
        }
    }
    for (int m = 0; m < tile; m++) {
        float out[8];
        _mm256_storeu_ps(out, min ? _mm256_add_ps(acc[m], mins[m]) : acc[m]);
        memcpy(y + (size_t)m * ld + 8 * h, out, sizeof(float) * (size_t)valid);
    }
}

/* `tile` x rows (a constant where inlined) against a group's 16 outputs */
Q8I_INLINE void q8i_tile(int type, int tile, const uint8_t *group, const q8i_x *x, int blocks, float *y, int ld,
                         int valid) {
    for (int h = 0; h < 2 && 8 * h < valid; h++)
        q8i_half(type, tile, group, x, blocks, y, ld, h, valid - 8 * h < 8 ? valid - 8 * h : 8);
}
#endif
