// `bench norms`: the check of the cpu's own kernels and baselines against the float64 reference
// kernels, on the rows of a call's arguments, before it is timed (verify_norm; the backend's rows
// are their op cases', check_case); the tolerances are normlab/tolerances.h's.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "bench_internal.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/reference_kernels.h"
#include "normlab/tolerances.h"

namespace normlab::bench {

namespace {

using detail::BufferSet;
using detail::Pool;

// ============================================================================
// the check against the reference
// ============================================================================

// One output's comparison: |got - want| <= atol*scale + rtol*|want|, where scale is 1 for the
// row outputs and sum_rows |term| for the parameter gradients (see verify_tolerances).
struct OutputCheck {
  std::string name;
  double atol = 0, rtol = 0;
  int64_t checked = 0, bad = 0;
  double max_err = 0;
  int64_t max_at = -1;
  struct Mismatch {
    int64_t index;
    double got, want, tol;
  };
  std::vector<Mismatch> first;  // the lowest indices that fail, at most kShown

  static constexpr size_t kShown = 4;

  void add(int64_t index, double got, double want, double scale) {
    ++checked;
    const double err = std::isnan(got) != std::isnan(want) ? INFINITY : std::fabs(got - want);
    const double tol = atol * scale + rtol * std::fabs(want);
    if (err > max_err || (std::isnan(err) && max_at < 0)) {
      max_err = std::isnan(err) ? INFINITY : err;
      max_at = index;
    }
    if (!(err <= tol)) {
      ++bad;
      if (first.size() < kShown) first.push_back({index, got, want, tol});
    }
  }
  void merge(const OutputCheck& o) {
    checked += o.checked;
    bad += o.bad;
    if (o.max_err > max_err) {
      max_err = o.max_err;
      max_at = o.max_at;
    }
    first.insert(first.end(), o.first.begin(), o.first.end());
    std::sort(first.begin(), first.end(), [](const Mismatch& a, const Mismatch& b) { return a.index < b.index; });
    if (first.size() > kShown) first.resize(kShown);
  }
};

// Tolerances, per output, with their reasons: normlab/tolerances.h (tol::kBench*). The reference
// is exact to float rounding (it computes in float64); a correct float32 kernel differs by its own
// rounding. dgamma and dbeta are held to their terms' magnitude (atol * sum_rows |term|), s to
// |alpha*a| + |b|.
constexpr Tolerance kTolRow = tol::kBenchRow;
constexpr Tolerance kTolStat = tol::kBenchStat;
constexpr Tolerance kTolParam = tol::kBenchParam;
constexpr Tolerance kTolSum = tol::kBenchSum;

// stored_rtol: half an ulp of the 16-bit format an output is stored in, else 0.
OutputCheck make_check(const std::string& name, Tolerance t, double stored_rtol = 0) {
  OutputCheck c;
  c.name = name;
  c.atol = t.atol;
  c.rtol = t.rtol + stored_rtol;
  return c;
}

std::string describe_failure(const OutputCheck& c, const std::string& what) {
  std::string s = fmt::format("{}: {} of {} {} values outside atol {:g}{} + rtol {:g}*|ref| (max |diff| {:.3g} at [{}]);",
                              what, c.bad, c.checked, c.name, c.atol,
                              c.name == "dgamma" || c.name == "dbeta" ? "*sum_rows|term|"
                              : c.name == "s"                         ? "*(|alpha*a|+|b|)"
                                                                      : "",
                              c.rtol, c.max_err,
                              c.max_at);
  for (const auto& m : c.first)
    s += fmt::format(" [{}] got {:.7g} want {:.7g} (tol {:.2g});", m.index, m.got, m.want, m.tol);
  s.pop_back();
  return s;
}

// Forward: every row recomputed by the reference in float64 and compared. The add+norm forward
// (add): the row is alpha*a + b in float64, compared with s, and normalized as a forward's x.
// DyT's and Derf's forward: every element against the reference's double tanh / erf.
std::vector<OutputCheck> check_squash_forward(const NormArgs& a, Squash f, double stored_rtol) {
  const int64_t d = a.d;
  const std::vector<double> gamma(a.gamma, a.gamma + d), beta(a.beta, a.beta + d);
  const double alpha = a.dyt_alpha, shift = a.derf_shift;
  // Rows on every core, as the norms' checks: a GPU check's 16384x8192 DyT rows took seconds on one.
  const int nt = omp_get_num_procs();
  std::vector<OutputCheck> per(static_cast<size_t>(nt), make_check("y", kTolRow, stored_rtol));
#pragma omp parallel num_threads(nt)
  {
    OutputCheck& c = per[static_cast<size_t>(omp_get_thread_num())];
    std::vector<double> y(static_cast<size_t>(d)), x(static_cast<size_t>(d));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < a.n; ++i) {
      for (int64_t j = 0; j < d; ++j) x[static_cast<size_t>(j)] = a.x[i * d + j];
      squash_forward_ref<double>(y.data(), x.data(), &alpha, &shift, gamma.data(), beta.data(), 1, d, f);
      for (int64_t j = 0; j < d; ++j) c.add(i * d + j, a.y[i * d + j], y[static_cast<size_t>(j)], 1.0);
    }
  }
  for (size_t t = 1; t < per.size(); ++t) per[0].merge(per[t]);
  return {per[0]};
}

// DyT's and Derf's backward: dx per element; dgamma, dbeta, dalpha (and Derf's dshift) summed in
// double, each held to the sum of its terms' magnitudes.
std::vector<OutputCheck> check_squash_backward(const NormArgs& a, Squash f, double stored_rtol) {
  const int64_t d = a.d;
  const double alpha = a.dyt_alpha, shift = a.derf_shift;
  // Per thread: dx's check and partial sums (columns: dgamma, dbeta and their magnitudes; scalars:
  // dalpha, dshift and theirs), added after the rows; the order of a double sum is far below the
  // tolerance of the float32 results checked against it.
  struct Partial {
    OutputCheck dx;
    std::vector<double> sg, ag, sb, ab;
    double sa = 0, aa = 0, ss = 0, as = 0;
  };
  const int nt = omp_get_num_procs();
  // Every slot made whole before the region: the runtime may start fewer threads than asked
  // (OMP_THREAD_LIMIT, OMP_DYNAMIC), and the merge reads them all.
  std::vector<Partial> per(static_cast<size_t>(nt));
  for (Partial& p : per) {
    p.dx = make_check("dx", kTolRow, stored_rtol);
    for (auto* v : {&p.sg, &p.ag, &p.sb, &p.ab}) v->assign(static_cast<size_t>(d), 0.0);
  }
#pragma omp parallel num_threads(nt)
  {
    Partial& p = per[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
    for (int64_t i = 0; i < a.n; ++i)
      for (int64_t j = 0; j < d; ++j) {
        const int64_t e = i * d + j;
        const size_t c = static_cast<size_t>(j);
        const double x = a.x[e], g = a.dy[e], u = alpha * x + shift, t = squash_ref(f, u);
        const double h = g * double(a.gamma[j]) * squash_slope_ref(f, u);
        if (a.dx) p.dx.add(e, a.dx[e], alpha * h, 1.0);
        p.sg[c] += g * t;
        p.ag[c] += std::fabs(g * t);
        p.sb[c] += g;
        p.ab[c] += std::fabs(g);
        p.sa += x * h;
        p.aa += std::fabs(x * h);
        p.ss += h;
        p.as += std::fabs(h);
      }
  }
  Partial& sum = per[0];
  for (size_t t = 1; t < per.size(); ++t) {
    const Partial& p = per[t];
    sum.dx.merge(p.dx);
    for (size_t c = 0; c < static_cast<size_t>(d); ++c)
      sum.sg[c] += p.sg[c], sum.ag[c] += p.ag[c], sum.sb[c] += p.sb[c], sum.ab[c] += p.ab[c];
    sum.sa += p.sa, sum.aa += p.aa, sum.ss += p.ss, sum.as += p.as;
  }
  std::vector<OutputCheck> out;
  if (a.dx) out.push_back(sum.dx);
  if (a.dgamma) {
    OutputCheck c = make_check("dgamma", kTolParam);
    for (int64_t j = 0; j < d; ++j) c.add(j, a.dgamma[j], sum.sg[static_cast<size_t>(j)], sum.ag[static_cast<size_t>(j)]);
    out.push_back(c);
  }
  if (a.dbeta) {
    OutputCheck c = make_check("dbeta", kTolParam);
    for (int64_t j = 0; j < d; ++j) c.add(j, a.dbeta[j], sum.sb[static_cast<size_t>(j)], sum.ab[static_cast<size_t>(j)]);
    out.push_back(c);
  }
  if (a.dalpha) {
    OutputCheck c = make_check("dalpha", kTolParam);
    c.add(0, *a.dalpha, sum.sa, sum.aa);
    out.push_back(c);
  }
  if (a.dshift) {
    OutputCheck c = make_check("dshift", kTolParam);
    c.add(0, *a.dshift, sum.ss, sum.as);
    out.push_back(c);
  }
  return out;
}

std::vector<OutputCheck> check_forward(NormKind norm, const NormArgs& a, bool add, double stored_rtol) {
  if (norm == NormKind::dyt) return check_squash_forward(a, Squash::tanh, stored_rtol);
  if (norm == NormKind::derf) return check_squash_forward(a, Squash::erf, stored_rtol);
  const bool ln = norm == NormKind::layernorm;
  const int64_t d = a.d;
  std::vector<double> gamma(a.gamma, a.gamma + d), beta;
  if (ln) beta.assign(a.beta, a.beta + d);
  const int nt = omp_get_num_procs();
  std::vector<std::vector<OutputCheck>> per(static_cast<size_t>(nt));
#pragma omp parallel num_threads(nt)
  {
    std::vector<OutputCheck> c = {make_check("y", kTolRow, stored_rtol), make_check("rstd", kTolStat)};
    const size_t at_mean = c.size();
    if (ln) c.push_back(make_check("mean", kTolStat));
    const size_t at_s = c.size();
    if (add) c.push_back(make_check("s", kTolSum, stored_rtol));
    std::vector<double> x(static_cast<size_t>(d)), y(static_cast<size_t>(d));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < a.n; ++i) {
      for (int64_t j = 0; j < d; ++j) {
        const int64_t e = i * d + j;
        if (!add) {
          x[static_cast<size_t>(j)] = a.x[e];
          continue;
        }
        const double scaled = static_cast<double>(a.alpha) * a.x[e];
        x[static_cast<size_t>(j)] = scaled + a.branch[e];
        c[at_s].add(e, a.s[e], x[static_cast<size_t>(j)], std::fabs(scaled) + std::fabs(a.branch[e]));
      }
      double mean = 0, rstd = 0;
      if (ln) {
        layernorm_forward_ref<double>(y.data(), &mean, &rstd, x.data(), gamma.data(), beta.data(), 1, d, a.eps);
      } else {
        rmsnorm_forward_ref<double>(y.data(), &rstd, x.data(), gamma.data(), 1, d, a.eps);
      }
      for (int64_t j = 0; j < d; ++j) c[0].add(i * d + j, a.y[i * d + j], y[static_cast<size_t>(j)], 1.0);
      c[1].add(i, a.rstd[i], rstd, 1.0);
      if (ln) c[at_mean].add(i, a.mean[i], mean, 1.0);
    }
    per[static_cast<size_t>(omp_get_thread_num())] = std::move(c);
  }
  std::vector<OutputCheck> out = per[0];
  for (size_t t = 1; t < per.size(); ++t)
    for (size_t k = 0; k < out.size(); ++k)
      if (k < per[t].size()) out[k].merge(per[t][k]);
  return out;
}

// Backward: dx row by row, dgamma/dbeta summed in float64 over blocks of rows, each block by
// the reference kernel (column by column inside a block that fits in cache).
std::vector<OutputCheck> check_backward(NormKind norm, const NormArgs& a, double stored_rtol) {
  if (norm == NormKind::dyt) return check_squash_backward(a, Squash::tanh, stored_rtol);
  if (norm == NormKind::derf) return check_squash_backward(a, Squash::erf, stored_rtol);
  const bool ln = norm == NormKind::layernorm;
  const int64_t d = a.d, n = a.n;
  constexpr int64_t kRows = 8;
  const int64_t blocks = (n + kRows - 1) / kRows;
  std::vector<double> gamma(a.gamma, a.gamma + d);
  const int nt = omp_get_num_procs();
  std::vector<std::vector<double>> dg(static_cast<size_t>(nt)), db(static_cast<size_t>(nt)),
      adg(static_cast<size_t>(nt)), adb(static_cast<size_t>(nt));
  std::vector<OutputCheck> dxc(static_cast<size_t>(nt));
#pragma omp parallel num_threads(nt)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    OutputCheck c = make_check("dx", kTolRow, stored_rtol);
    std::vector<double> x(static_cast<size_t>(kRows * d)), dy(x.size()), dx(x.size()), mean(kRows), rstd(kRows),
        pdg(static_cast<size_t>(d)), pdb(static_cast<size_t>(d));
    std::vector<double>& sdg = dg[t];
    std::vector<double>& sdb = db[t];
    std::vector<double>& sadg = adg[t];
    std::vector<double>& sadb = adb[t];
    sdg.assign(static_cast<size_t>(d), 0.0);
    sdb.assign(static_cast<size_t>(d), 0.0);
    sadg.assign(static_cast<size_t>(d), 0.0);
    sadb.assign(static_cast<size_t>(d), 0.0);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t lo = blk * kRows, rows = std::min(kRows, n - lo);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = lo + r;
        mean[static_cast<size_t>(r)] = ln ? a.saved_mean[i] : 0.0;
        rstd[static_cast<size_t>(r)] = a.saved_rstd[i];
        for (int64_t j = 0; j < d; ++j) {
          const size_t e = static_cast<size_t>(r * d + j);
          x[e] = a.x[i * d + j];
          dy[e] = a.dy[i * d + j];
          // The magnitude the parameter-gradient sums pass through (their tolerance scale).
          const double xhat = (x[e] - mean[static_cast<size_t>(r)]) * rstd[static_cast<size_t>(r)];
          sadg[static_cast<size_t>(j)] += std::fabs(dy[e] * xhat);
          sadb[static_cast<size_t>(j)] += std::fabs(dy[e]);
        }
      }
      if (ln) {
        layernorm_backward_ref<double>(dx.data(), pdg.data(), pdb.data(), dy.data(), x.data(), gamma.data(),
                                       mean.data(), rstd.data(), rows, d);
      } else {
        rmsnorm_backward_ref<double>(dx.data(), pdg.data(), dy.data(), x.data(), gamma.data(), rstd.data(), rows, d);
      }
      for (int64_t j = 0; j < d; ++j) {
        sdg[static_cast<size_t>(j)] += pdg[static_cast<size_t>(j)];
        if (ln) sdb[static_cast<size_t>(j)] += pdb[static_cast<size_t>(j)];
      }
      if (a.dx)
        for (int64_t e = 0; e < rows * d; ++e) c.add(lo * d + e, a.dx[lo * d + e], dx[static_cast<size_t>(e)], 1.0);
    }
    dxc[t] = std::move(c);
  }
  std::vector<OutputCheck> out;
  OutputCheck cdx = dxc[0];
  for (size_t t = 1; t < dxc.size(); ++t) cdx.merge(dxc[t]);
  if (a.dx) out.push_back(cdx);
  auto sum_threads = [&](std::vector<std::vector<double>>& v) {
    std::vector<double> s(static_cast<size_t>(d), 0.0);
    for (auto& part : v)
      for (size_t j = 0; j < part.size(); ++j) s[j] += part[j];
    return s;
  };
  const std::vector<double> rdg = sum_threads(dg), rdb = sum_threads(db), sadg = sum_threads(adg),
                            sadb = sum_threads(adb);
  if (a.dgamma) {
    OutputCheck c = make_check("dgamma", kTolParam);
    for (int64_t j = 0; j < d; ++j) c.add(j, a.dgamma[j], rdg[static_cast<size_t>(j)], sadg[static_cast<size_t>(j)]);
    out.push_back(c);
  }
  if (ln && a.dbeta) {
    OutputCheck c = make_check("dbeta", kTolParam);
    for (int64_t j = 0; j < d; ++j) c.add(j, a.dbeta[j], rdb[static_cast<size_t>(j)], sadb[static_cast<size_t>(j)]);
    out.push_back(c);
  }
  return out;
}

}  // namespace

void detail::fill_nan(float* p, int64_t n) {
  if (!p) return;
  constexpr int64_t kChunk = 1 << 16;
  detail::parallel_all((n + kChunk - 1) / kChunk, [&](int64_t c) {
    std::fill(p + c * kChunk, p + std::min(n, (c + 1) * kChunk), std::numeric_limits<float>::quiet_NaN());
  });
}

VerifyResult verify_norm(const NormImpl& impl, Pass pass, const NormArgs& a) {
  const NormFn& fn = impl.fn(pass);
  NL_CHECK(static_cast<bool>(fn), "{} has no {} pass", impl.name(), to_string(pass));
  // Half an ulp of the format an output is stored in, relative: 2^-8 (bf16), 2^-11 (fp16).
  const Precision stored = detail::storage_of(impl.dtype);
  const double stored_rtol = tol::stored_half_ulp(stored);
  using detail::fill_nan;
  if (pass != Pass::bwd) {
    fill_nan(a.y, a.n * a.d);
    fill_nan(a.mean, a.n);
    fill_nan(a.rstd, a.n);
    if (pass == Pass::addfwd) fill_nan(a.s, a.n * a.d);
  } else {
    fill_nan(a.dx, a.n * a.d);
    fill_nan(a.dgamma, a.d);
    fill_nan(a.dbeta, a.d);
    fill_nan(a.dalpha, 1);
    fill_nan(a.dshift, 1);
  }
  fn(a);
  const std::vector<OutputCheck> checks =
      pass == Pass::bwd ? check_backward(impl.norm, a, stored_rtol)
                        : check_forward(impl.norm, a, pass == Pass::addfwd, stored_rtol);
  VerifyResult r;
  r.pass = true;
  const std::string what = fmt::format("{} {} {}x{}", impl.name(), to_string(pass), a.n, a.d);
  for (const OutputCheck& c : checks) {
    if (c.max_err >= r.max_abs_err) {
      r.max_abs_err = c.max_err;
      r.worst_output = c.name;
    }
    if (c.bad > 0) {
      r.pass = false;
      r.report += (r.report.empty() ? "" : " | ") + describe_failure(c, what);
    }
  }
  return r;
}

}  // namespace normlab::bench
