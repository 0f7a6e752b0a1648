// LayerNorm row sum of d = 64 floats in the order of c2e24bf's row_reduce + reduce_add,
// kWidth 8 (AVX2 build) against kWidth 16 (AVX-512 build), emulated in scalar float adds.
#include <cstdio>
#include <random>
float avx2(const float* x) {
  float a[4][8], v[8], t[4];
  for (int k = 0; k < 4; ++k) for (int i = 0; i < 8; ++i) a[k][i] = x[8 * k + i] + x[32 + 8 * k + i];
  for (int i = 0; i < 8; ++i) v[i] = (a[0][i] + a[1][i]) + (a[2][i] + a[3][i]);
  for (int i = 0; i < 4; ++i) t[i] = v[i] + v[i + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}
float avx512(const float* x) {
  float v[16], t3[8], t6[4];
  for (int i = 0; i < 16; ++i) v[i] = (x[i] + x[16 + i]) + (x[32 + i] + x[48 + i]);
  for (int i = 0; i < 8; ++i) t3[i] = v[8 + i] + v[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}
int main() {
  std::mt19937 g(0);
  std::normal_distribution<float> nd;
  const int n = 100000;
  int diff = 0;
  float x[64];
  for (int r = 0; r < n; ++r) {
    for (float& e : x) e = nd(g);
    diff += avx2(x) != avx512(x);
  }
  std::printf("rows of 64 N(0,1) floats whose sum differs between the two orders: %d of %d (%.1f%%)\n", diff, n, 100.0 * diff / n);
}
