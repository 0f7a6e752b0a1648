// The few statistics several layers report (bench timings, sweep cells over seeds, probe values
// over seeds), one definition each, and how an undefined one is written in JSON.
#pragma once
#include <cmath>
#include <vector>

namespace normlab {

// The arithmetic mean; NaN for no values.
double mean(const std::vector<double>& v);
// The sample standard deviation (divided by n - 1) around mean(v); 0 for one value, NaN for none.
double sample_std(const std::vector<double>& v);
// The middle value, or the mean of the two middle values; NaN for no values.
double median(std::vector<double> v);

// The 0.975 quantile of Student's t with `dof` degrees of freedom (dof >= 1): the half-width of a
// two-sided 95% interval is t * sd / sqrt(n) with dof = n - 1. Exact to 3 decimals (a table to 30,
// the Cornish-Fisher expansion beyond); NaN for dof < 1.
double t_quantile_975(int dof);

// A paired comparison: the mean of the differences and its two-sided 95% Student-t interval.
struct PairedDifference {
  int n = 0;
  double mean = NAN, low = NAN, high = NAN;  // low/high NaN when n < 2
};
PairedDifference paired_difference(const std::vector<double>& differences);

// A number for a JSON document: JSON has no NaN or infinity, so a value that is not finite (a
// statistic that is undefined, a ratio of nothing) is written as null. A template over the JSON
// type so that core needs no JSON library: json_number<nlohmann::json>(x) in the layers that have
// one, nlohmann::ordered_json alike.
template <class Json>
Json json_number(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

}  // namespace normlab
