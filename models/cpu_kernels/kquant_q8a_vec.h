/* The registers of the q8a arithmetic (kquant_q8a.h): b32 holds a block's 32 int8 values, i8l the
   8 int32 lane sums of a block dot product (lane j: values 4j..4j+3, exact integers), f8 the 8 fp32
   lanes they are scaled into. VNNI (one vpdpbusd), AVX2 (maddubs + madd) or plain C: the integer
   sums are exact and every fp32 step is one IEEE operation, so all give the same bits. */
#ifndef KVGATE_KQUANT_Q8A_VEC_H
#define KVGATE_KQUANT_Q8A_VEC_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* how many x rows share each decoded weight block: as many as the registers hold */
#if defined(__AVX512VL__)
#define Q8A_ROW_TILE 4
#elif defined(__AVX2__) && defined(__FMA__)
#define Q8A_ROW_TILE 2
#else
#define Q8A_ROW_TILE 1
#endif

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
typedef __m256i b32;
typedef __m256i i8l;
typedef __m256 f8;
static inline b32 b32_load(const int8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
/* 16 bytes of nibbles: low nibbles are values 0-15, high nibbles 16-31 */
static inline b32 b32_nibbles(const uint8_t *p) {
    __m128i raw = _mm_loadu_si128((const __m128i *)p);
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(15));
}
/* value e: 16 where bit e of word is set, else 0 */
static inline b32 b32_bit4(uint32_t word) {
    __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)word),
        _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}
/* value l: (p[l] >> shift) & mask, 32 bytes */
static inline b32 b32_field(const uint8_t *p, int shift, int mask) {
    __m256i bytes = _mm256_loadu_si256((const __m256i *)p);
    return _mm256_and_si256(_mm256_srl_epi16(bytes, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8((char)mask));
}
static inline b32 b32_shl4(b32 a) { return _mm256_slli_epi16(a, 4); }  /* values < 16: no byte spills */
static inline b32 b32_or(b32 a, b32 b) { return _mm256_or_si256(a, b); }
static inline i8l i8l_load(const int32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
/* start + lane sums of w * x, w in 0..31 */
static inline i8l dot_unsigned_from(i8l start, b32 w, b32 x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(start, w, x);
#else  /* |pair| <= 2 * 31 * 127: maddubs does not saturate */
    return _mm256_add_epi32(start, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
#endif
}
static inline i8l dot_unsigned(b32 w, b32 x) { return dot_unsigned_from(_mm256_setzero_si256(), w, x); }
/* lane sums of w * x, w and x in -128..127, x not -128: |w| * (x signed as w), |w| <= 128 */
static inline i8l dot_signed(b32 w, b32 x) {
    return dot_unsigned(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}
static inline f8 f8_zero(void) { return _mm256_setzero_ps(); }
static inline f8 f8_fma(float scale, i8l sums, f8 acc) {
    return _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sums), acc);
}
/* lanes 0-3 scaled by low, 4-7 by high */
static inline f8 f8_fma2(float low, float high, i8l sums, f8 acc) {
    return _mm256_fmadd_ps(_mm256_set_m128(_mm_set1_ps(high), _mm_set1_ps(low)), _mm256_cvtepi32_ps(sums), acc);
}
static inline float f8_sum(f8 v) {  /* lanes l and l + 4, then l + 2, l + 1 */
    __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}
#else
typedef struct { int8_t v[32]; } b32;
typedef struct { int32_t l[8]; } i8l;
typedef struct { float l[8]; } f8;
static inline b32 b32_load(const int8_t *p) { b32 b; memcpy(b.v, p, 32); return b; }
static inline b32 b32_nibbles(const uint8_t *p) {
    b32 b;
    for (int i = 0; i < 16; i++) { b.v[i] = p[i] & 15; b.v[i + 16] = p[i] >> 4; }
    return b;
}
static inline b32 b32_bit4(uint32_t word) {
    b32 b;
    for (int e = 0; e < 32; e++) b.v[e] = ((word >> e) & 1) << 4;
    return b;
}
static inline b32 b32_field(const uint8_t *p, int shift, int mask) {
    b32 b;
    for (int l = 0; l < 32; l++) b.v[l] = (p[l] >> shift) & mask;
    return b;
}
static inline b32 b32_shl4(b32 a) { for (int i = 0; i < 32; i++) a.v[i] <<= 4; return a; }
static inline b32 b32_or(b32 a, b32 b) { for (int i = 0; i < 32; i++) a.v[i] |= b.v[i]; return a; }
static inline i8l dot_signed(b32 w, b32 x) {
    i8l s = {{0}};
    for (int i = 0; i < 32; i++) s.l[i / 4] += w.v[i] * x.v[i];
    return s;
}
static inline i8l dot_unsigned(b32 w, b32 x) { return dot_signed(w, x); }
static inline i8l i8l_load(const int32_t *p) { i8l v; memcpy(v.l, p, 32); return v; }
static inline i8l dot_unsigned_from(i8l start, b32 w, b32 x) {
    i8l s = dot_signed(w, x);
    for (int l = 0; l < 8; l++) s.l[l] += start.l[l];
    return s;
}
static inline f8 f8_zero(void) { return (f8){{0}}; }
static inline f8 f8_fma(float scale, i8l sums, f8 acc) {
    for (int l = 0; l < 8; l++) acc.l[l] = fmaf(scale, (float)sums.l[l], acc.l[l]);
    return acc;
}
static inline f8 f8_fma2(float low, float high, i8l sums, f8 acc) {
    for (int l = 0; l < 8; l++) acc.l[l] = fmaf(l < 4 ? low : high, (float)sums.l[l], acc.l[l]);
    return acc;
}
static inline float f8_sum(f8 v) {
    for (int width = 4; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) v.l[l] = v.l[l] + v.l[l + width];
    return v.l[0];
}
#endif
#endif
