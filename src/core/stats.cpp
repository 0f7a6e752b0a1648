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

}  // namespace normlab
