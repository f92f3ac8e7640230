/* The q8a arithmetic's view of Q4_K, Q5_K and Q6_K (kquant_blocks.h has the layouts): 32-weight
   sub-block j of a super-block as integers q with lane scales and a min, so that the 32-block dot
   products of kquant_q8a_rows.h take them as they take Q4_1's blocks:
     Q4_K / Q5_K  q 0..15 / 0..31, scale d * sc_j for all 8 lanes, m = -(dmin * mn_j)
     Q6_K         q 0..63 (the lane sums start from -32 * each lane's sum of x), scale d * scale[2j]
                  for lanes 0-3 (weights 0-15), d * scale[2j + 1] for lanes 4-7 */
#ifndef KVGATE_KQUANT_Q8A_K_H
#define KVGATE_KQUANT_Q8A_K_H
#include <stdint.h>

#include "kquant_blocks.h"
#include "kquant_q8a_vec.h"

/* a weight block (or sub-block) as the dot products take it: its quants, the scale of lanes 0-3 and
   of lanes 4-7 (the same but in Q6_K), and m (0 where it has none) */
typedef struct { b32 w; float d, d_high, m; } wblock;

/* sub-block j of Q4_K super-block b, or Q5_K's where wide */
INLINE wblock k_sub_block(const uint8_t *b, int j, int wide) {
    int sc, mn;
    scale_min(b + 4, j, &sc, &mn);
    float d = half_to_float(b) * (float)sc;
    const uint8_t *q = b + (wide ? 48 : 16) + 32 * (j / 2);
    b32 quants = b32_field(q, 4 * (j % 2), 15);
    if (wide) quants = b32_or(quants, b32_shl4(b32_field(b + 16, j, 1)));
    return (wblock){quants, d, d, -(half_to_float(b + 2) * (float)mn)};
}

/* sub-block j = 4h + g of a Q6_K super-block: elements 128h + 32g + l */
INLINE wblock q6_k_sub_block(const uint8_t *b, int j) {
    int h = j / 4, g = j % 4;
    const int8_t *scales = (const int8_t *)(b + 192);
    float d = half_to_float(b + 208);
    b32 low = b32_field(b + 64 * h + 32 * (g & 1), 4 * (g / 2), 15);
    b32 high = b32_field(b + 128 + 32 * h, 2 * g, 3);
    return (wblock){b32_or(low, b32_shl4(high)), d * (float)scales[8 * h + 2 * g], d * (float)scales[8 * h + 2 * g + 1],
                    0.0f};
}
#endif
