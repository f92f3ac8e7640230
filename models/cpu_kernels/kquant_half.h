/* An fp16 scale of a GGUF block as fp32: exact, as numpy's astype(np.float32) and ggml's
   GGML_FP16_TO_FP32 are (F16C's instruction where the build has it, else by the bits). */
#ifndef KVGATE_KQUANT_HALF_H
#define KVGATE_KQUANT_HALF_H
#include <stdint.h>
#include <string.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

static inline float half_to_float(const uint8_t *p) {
    uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
#ifdef __F16C__
    return _cvtsh_ss(h);
#endif
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu, bits;
    if (exponent == 0x1f) bits = sign | 0x7f800000u | (mantissa << 13);
    else if (exponent) bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    else if (!mantissa) bits = sign;
    else {  /* subnormal: normalise the mantissa */
        exponent = 113;
        while (!(mantissa & 0x400u)) { mantissa <<= 1; exponent--; }
        bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
}
#endif
