/* x rows quantized for q8i: int8 per 32 values as ggml's quantize_row_q8_1_ref (q8i.h's docstring),
   in plain C and, where built, 16 (AVX-512) or 8 (AVX2) lanes at a time with the same bits. */
#ifndef KVGATE_Q8I_QUANTIZE_H
#define KVGATE_Q8I_QUANTIZE_H
#include <math.h>

#include "q8i_layout.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* x fp32 [K] into K / 32 blocks, each step one fp32 operation */
static inline void q8i_quantize_row_plain(const float *x, int K, q8i_x *out) {
    for (int b = 0; b < K / 32; b++, x += 32) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int total = 0;
        for (int i = 0; i < 32; i++) {
            out[b].q[i] = (int8_t)fminf(127.0f, fmaxf(-127.0f, roundf(x[i] * id)));
            total += out[b].q[i];
            if (i == 15) out[b].qsum_low = total;
        }
        out[b].d = d;
        out[b].qsum = total;
        out[b].sum = d * (float)total;
    }
}

#if defined(__AVX512F__)
/* roundf of 16 lanes (half away from zero): the truncation, plus the sign where the dropped part,
   exact, is at least a half; NaN stays NaN */
static inline __m512 q8i_round(__m512 v) {
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512i sign = _mm512_and_epi32(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u));
    __m512 one = _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(_mm512_set1_ps(1.0f)), sign));
    __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm512_mask_add_ps(t, up, t, one);
}

/* q8i_quantize_row_plain's bits, 16 lanes at a time (max_ps keeps its second operand where the first
   is NaN, as the plain loop's comparison and fmaxf do) */
static inline void q8i_quantize_row(const float *x, int K, q8i_x *out) {
    for (int b = 0; b < K / 32; b++, x += 32) {
        __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
        __m512 amax = _mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_setzero_ps());
        amax = _mm512_max_ps(_mm512_abs_ps(v[1]), amax);
        float d = _mm512_reduce_max_ps(amax) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sums[2];
        for (int h = 0; h < 2; h++) {
            __m512 r = q8i_round(_mm512_mul_ps(v[h], _mm512_set1_ps(id)));
            r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
            __m512i q = _mm512_cvttps_epi32(r);
            _mm_storeu_si128((__m128i *)(out[b].q + 16 * h), _mm512_cvtepi32_epi8(q));
            sums[h] = _mm512_reduce_add_epi32(q);
        }
        out[b].d = d;
        out[b].qsum_low = sums[0];
        out[b].qsum = sums[0] + sums[1];
        out[b].sum = d * (float)out[b].qsum;
    }
}
#elif defined(__AVX2__)
/* roundf of 8 lanes, as q8i_round */
static inline __m256 q8i_round(__m256 v) {
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 sign = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
    __m256 magnitude = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)), _mm256_sub_ps(v, t));
    __m256 up = _mm256_cmp_ps(magnitude, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(_mm256_set1_ps(1.0f), sign)));
}

static inline float q8i_max8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

/* q8i_quantize_row_plain's bits, 8 lanes at a time (max_ps keeps its second operand on NaN) */
static inline void q8i_quantize_row(const float *x, int K, q8i_x *out) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int b = 0; b < K / 32; b++, x += 32) {
        __m256 v[4], amax = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            amax = _mm256_max_ps(_mm256_and_ps(v[i], abs_mask), amax);
        }
        float d = q8i_max8(amax) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sums[4];
        for (int i = 0; i < 4; i++) {
            __m256 r = q8i_round(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
            r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
            int32_t q[8];
            _mm256_storeu_si256((__m256i *)q, _mm256_cvttps_epi32(r));
            sums[i] = 0;
            for (int k = 0; k < 8; k++) {
                out[b].q[8 * i + k] = (int8_t)q[k];
                sums[i] += q[k];
            }
        }
        out[b].d = d;
        out[b].qsum_low = sums[0] + sums[1];
        out[b].qsum = out[b].qsum_low + sums[2] + sums[3];
        out[b].sum = d * (float)out[b].qsum;
    }
}
#else
#define q8i_quantize_row q8i_quantize_row_plain
#endif
#endif
