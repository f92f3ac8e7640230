/* The K-quant matmuls of kquant_matmul.h, exported for kquant.py (ctypes). */
#include "kquant_matmul.h"

const char *kquant_variant(void) { return VARIANT; }

/* x fp32 [M][K], raw [N][row_bytes] blocks of `type`, y fp32 [M][N]; returns 0, or -1 where a
   buffer could not be had */
int kquant_matmul(const float *x, const uint8_t *raw, float *y, int M, int N, int K, int type, int threads) {
    return kquant_matmul_into(x, raw, y, M, N, K, N, type, threads);
}

/* the q8a arithmetic: arguments and result as kquant_matmul */
int kquant_q8a_matmul(const float *x, const uint8_t *raw, float *y, int M, int N, int K, int type, int threads) {
    return kquant_q8a_matmul_into(x, raw, y, M, N, K, type, threads);
}
