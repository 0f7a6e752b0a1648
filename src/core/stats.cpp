#include "normlab/stats.h"

#include <algorithm>

namespace normlab {

double mean(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double sample_std(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  if (v.size() == 1) return 0.0;
  const double m = mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double t_quantile_975(int dof) {
  static const double table[30] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                   2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                   2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (dof < 1) return NAN;
  if (dof <= 30) return table[dof - 1];
  const double z = 1.959963984540054, n = dof;
  const double z3 = z * z * z, z5 = z3 * z * z;
  return z + (z3 + z) / (4 * n) + (5 * z5 + 16 * z3 + 3 * z) / (96 * n * n);
}

PairedDifference paired_difference(const std::vector<double>& differences) {
  PairedDifference d;
  d.n = static_cast<int>(differences.size());
  if (d.n == 0) return d;
  d.mean = mean(differences);
  if (d.n < 2) return d;
  const double half = t_quantile_975(d.n - 1) * sample_std(differences) / std::sqrt(static_cast<double>(d.n));
  d.low = d.mean - half;
  d.high = d.mean + half;
  return d;
}

}  // namespace normlab
