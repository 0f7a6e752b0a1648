// Shared by the probe implementation files (src/train/probe*.cpp); not a public header.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/probe.h"

namespace normlab {

// Frobenius norm of a tensor read back to the host; 0 for an undefined one (no gradient reached it).
double frobenius(const Tensor& t);
// a / b; NaN when b is 0.
double ratio(double a, double b);
// get(seed) over the seeds, summarized (mean, spread).
template <class T, class F>
Stat over(const std::vector<T>& seeds, F get) {
  std::vector<double> v;
  v.reserve(seeds.size());
  for (const T& s : seeds) v.push_back(get(s));
  return summarize(v);
}

// The encoder-decoder's Fig. 3 probe (probe_encdec.cpp) as the report's text section and JSON.
std::string xiong_encdec_text(const XiongEncDecResult& r, const ProbeOptions& opt);
nlohmann::json xiong_encdec_json(const XiongEncDecResult& r);

}  // namespace normlab
