/* The 16 fp32 accumulator lanes of the kquant dot product, in whichever registers the build's
   instruction set has: one AVX-512 register, two AVX2 registers (lanes 0-7 and 8-15), or 16 plain
   floats with fmaf (the scalar reference). Each lane only ever sees fma(x, w, lane), so all three
   give the same bits. The v16i lanes hold the 16 bytes of a block being unpacked, widened
   to 32 bits. ROW_TILE is how many x rows share each loaded weight vector: as many as the
   registers hold without spilling. */
#ifndef KVGATE_KQUANT_VEC_H
#define KVGATE_KQUANT_VEC_H
#include <math.h>
#include <stdint.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#if defined(__AMX_BF16__)
#define VARIANT "amx"
#else
#define VARIANT "avx512"
#endif
#define ROW_TILE 4
typedef __m512 v16;
static inline v16 v_zero(void) { return _mm512_setzero_ps(); }
static inline v16 v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline v16 v_fma(v16 x, v16 w, v16 acc) { return _mm512_fmadd_ps(x, w, acc); }
static inline void v_store(float *p, v16 v) { _mm512_storeu_ps(p, v); }
static inline v16 v_set1(float f) { return _mm512_set1_ps(f); }
static inline v16 v_mul(v16 a, v16 b) { return _mm512_mul_ps(a, b); }
static inline v16 v_add(v16 a, v16 b) { return _mm512_add_ps(a, b); }
static inline v16 v_sub(v16 a, v16 b) { return _mm512_sub_ps(a, b); }
static inline __m128i bytes16(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
static inline v16 v_u8(const uint8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes16(p))); }
static inline v16 v_i8(const int8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes16(p))); }
typedef __m512i v16i;
static inline v16i vi_u8(const uint8_t *p) { return _mm512_cvtepu8_epi32(bytes16(p)); }
static inline v16i vi_bits(v16i v, int shift, int mask) {
    return _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(shift)), _mm512_set1_epi32(mask));
}
static inline v16i vi_or_shifted(v16i a, v16i b, int shift) {
    return _mm512_or_si512(a, _mm512_sll_epi32(b, _mm_cvtsi32_si128(shift)));
}
/* the high nibbles of widened bytes (0..255): vi_bits(v, 4, 15) without the mask */
static inline v16i vi_high4(v16i v) { return _mm512_srli_epi32(v, 4); }
static inline v16 v_int(v16i v) { return _mm512_cvtepi32_ps(v); }
/* picking each lane's weight from a table of the 16 (or 32) values a block's quants can take costs
   one instruction, where converting and scaling costs three */
#define V_LOOKUP 1
static inline v16 v_iota(float first) {
    return _mm512_add_ps(_mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_ps(first));
}
static inline v16 v_lookup(v16 table, v16i index) { return _mm512_permutexvar_ps(index, table); }
/* a nibble of widened bytes as a v_lookup index: the lookup reads only an index's low 4 bits */
static inline v16i vi_nibble(v16i bytes, int high) { return high ? _mm512_srli_epi32(bytes, 4) : bytes; }
static inline v16 v_lookup2(v16 low, v16 high, v16i index) { return _mm512_permutex2var_ps(low, index, high); }
/* q with bit 4 of lane l set where bit first + l of word is: one masked or */
static inline v16i vi_bit4(v16i q, uint32_t word, int first) {
    return _mm512_mask_or_epi32(q, (__mmask16)(word >> first), q, _mm512_set1_epi32(16));
}
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VARIANT "avx2"
#define ROW_TILE 1
typedef struct { __m256 lo, hi; } v16;
static inline v16 v_zero(void) { return (v16){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline v16 v_load(const float *p) { return (v16){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
static inline v16 v_fma(v16 x, v16 w, v16 acc) {
    return (v16){_mm256_fmadd_ps(x.lo, w.lo, acc.lo), _mm256_fmadd_ps(x.hi, w.hi, acc.hi)};
}
static inline void v_store(float *p, v16 v) { _mm256_storeu_ps(p, v.lo); _mm256_storeu_ps(p + 8, v.hi); }
static inline v16 v_set1(float f) { return (v16){_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
static inline v16 v_mul(v16 a, v16 b) { return (v16){_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
static inline v16 v_add(v16 a, v16 b) { return (v16){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
static inline v16 v_sub(v16 a, v16 b) { return (v16){_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
static inline __m128i bytes8(const void *p) { return _mm_loadl_epi64((const __m128i *)p); }
static inline __m256 u8x8(const uint8_t *p) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes8(p))); }
static inline __m256 i8x8(const int8_t *p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes8(p))); }
static inline v16 v_u8(const uint8_t *p) { return (v16){u8x8(p), u8x8(p + 8)}; }
static inline v16 v_i8(const int8_t *p) { return (v16){i8x8(p), i8x8(p + 8)}; }
typedef struct { __m256i lo, hi; } v16i;
static inline __m256i u8x8i(const uint8_t *p) { return _mm256_cvtepu8_epi32(bytes8(p)); }
static inline v16i vi_u8(const uint8_t *p) { return (v16i){u8x8i(p), u8x8i(p + 8)}; }
static inline __m256i bits8(__m256i v, int shift, int mask) {
    return _mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi32(mask));
}
static inline v16i vi_bits(v16i v, int shift, int mask) {
    return (v16i){bits8(v.lo, shift, mask), bits8(v.hi, shift, mask)};
}
static inline v16i vi_high4(v16i v) { return (v16i){_mm256_srli_epi32(v.lo, 4), _mm256_srli_epi32(v.hi, 4)}; }
static inline v16i vi_or_shifted(v16i a, v16i b, int shift) {
    __m128i count = _mm_cvtsi32_si128(shift);
    return (v16i){_mm256_or_si256(a.lo, _mm256_sll_epi32(b.lo, count)),
                  _mm256_or_si256(a.hi, _mm256_sll_epi32(b.hi, count))};
}
static inline v16 v_int(v16i v) { return (v16){_mm256_cvtepi32_ps(v.lo), _mm256_cvtepi32_ps(v.hi)}; }
static inline __m256i word_bits8(uint32_t word, int first) {
    __m256i shifts = _mm256_add_epi32(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_epi32(first));
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)word), shifts), _mm256_set1_epi32(1));
}
static inline v16i vi_word_bits(uint32_t word, int first) {
    return (v16i){word_bits8(word, first), word_bits8(word, first + 8)};
}
/* q with bit 4 of lane l set where bit first + l of word is */
static inline v16i vi_bit4(v16i q, uint32_t word, int first) { return vi_or_shifted(q, vi_word_bits(word, first), 4); }
#else
#define VARIANT "scalar"
#define ROW_TILE 1
typedef struct { float lane[16]; } v16;
static inline v16 v_zero(void) { return (v16){{0}}; }
static inline v16 v_load(const float *p) { v16 v; for (int l = 0; l < 16; l++) v.lane[l] = p[l]; return v; }
static inline v16 v_fma(v16 x, v16 w, v16 acc) {
    for (int l = 0; l < 16; l++) acc.lane[l] = fmaf(x.lane[l], w.lane[l], acc.lane[l]);
    return acc;
}
static inline void v_store(float *p, v16 v) { for (int l = 0; l < 16; l++) p[l] = v.lane[l]; }
#define V_LANEWISE(name, expression) \
    static inline v16 name(v16 a, v16 b) { v16 v; for (int l = 0; l < 16; l++) v.lane[l] = expression; return v; }
V_LANEWISE(v_mul, a.lane[l] * b.lane[l])
V_LANEWISE(v_add, a.lane[l] + b.lane[l])
V_LANEWISE(v_sub, a.lane[l] - b.lane[l])
static inline v16 v_set1(float f) { v16 v; for (int l = 0; l < 16; l++) v.lane[l] = f; return v; }
static inline v16 v_u8(const uint8_t *p) { v16 v; for (int l = 0; l < 16; l++) v.lane[l] = (float)p[l]; return v; }
static inline v16 v_i8(const int8_t *p) { v16 v; for (int l = 0; l < 16; l++) v.lane[l] = (float)p[l]; return v; }
typedef struct { int lane[16]; } v16i;
static inline v16i vi_u8(const uint8_t *p) { v16i v; for (int l = 0; l < 16; l++) v.lane[l] = p[l]; return v; }
static inline v16i vi_bits(v16i v, int shift, int mask) {
    for (int l = 0; l < 16; l++) v.lane[l] = (v.lane[l] >> shift) & mask;
    return v;
}
static inline v16i vi_high4(v16i v) { return vi_bits(v, 4, 15); }
static inline v16i vi_or_shifted(v16i a, v16i b, int shift) {
    for (int l = 0; l < 16; l++) a.lane[l] |= b.lane[l] << shift;
    return a;
}
static inline v16 v_int(v16i v) { v16 f; for (int l = 0; l < 16; l++) f.lane[l] = (float)v.lane[l]; return f; }
static inline v16i vi_word_bits(uint32_t word, int first) {
    v16i v;
    for (int l = 0; l < 16; l++) v.lane[l] = (word >> (first + l)) & 1;
    return v;
}
static inline v16i vi_bit4(v16i q, uint32_t word, int first) { return vi_or_shifted(q, vi_word_bits(word, first), 4); }
#endif

/* lanes l and l + 8, then l and l + 4, l + 2, l + 1: the fixed tree every variant uses */
#if defined(__AVX2__)
static inline float sum8(__m256 v) {
    __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}
#endif
static inline float v_sum(v16 v) {
#if defined(__AVX512F__)
    __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return sum8(_mm256_add_ps(_mm512_castps512_ps256(v), high));
#elif defined(__AVX2__) && defined(__FMA__)
    return sum8(_mm256_add_ps(v.lo, v.hi));
#else
    for (int width = 8; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) v.lane[l] = v.lane[l] + v.lane[l + width];
    return v.lane[0];
#endif
}
#endif
