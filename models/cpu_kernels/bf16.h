/* bf16 <-> fp32 as torch converts them: widening is exact; narrowing rounds to nearest even and
   turns every NaN into 0x7fc0. */
#ifndef KVGATE_BF16_H
#define KVGATE_BF16_H
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t v) {
    uint32_t bits = (uint32_t)v << 16;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}
#endif
