// `bench norms`: buffer sets that rotate through more memory than the caches hold (or, for the
// resident shapes, one set that stays in them), the check of each implementation against the
// float64 reference kernels, the interleaved timing loop, and the derived figures (GB/s, % of the
// measured copy bandwidth, speed-ups).
//
//   normlab bench norms                               the default shapes, 1 and all threads
//   normlab bench norms --shapes 8x256x1024 --impl fused --pass fwd --threads 1
//   normlab bench norms --resident-shapes 1x512x64 --pass addfwd
#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "normlab/reference_kernels.h"
#include "bench_internal.h"
#include "normlab/backend.h"
#include "normlab/bench.h"
#include "normlab/cpu_kernels.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/system.h"


namespace normlab::bench {

namespace detail {

int64_t cache_resident_below(int64_t llc_bytes) {
  return std::max<int64_t>(int64_t{1} << 30, 4 * llc_bytes);
}

}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

// ============================================================================
// memory: 2 MiB-aligned blocks, transparent huge pages asked for, touched when filled
// ============================================================================

constexpr size_t kHugePage = size_t{2} << 20;

class Block {
 public:
  explicit Block(size_t floats) {
    bytes_ = std::max<size_t>(kHugePage, (floats * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage);
    p_ = static_cast<float*>(std::aligned_alloc(kHugePage, bytes_));
    NL_CHECK(p_ != nullptr, "bench: cannot allocate {} MiB", bytes_ >> 20);
    madvise(p_, bytes_, MADV_HUGEPAGE);  // a hint; without it the timings see 4 KiB pages' TLB misses
  }
  ~Block() { std::free(p_); }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  float* get() const { return p_; }

 private:
  float* p_ = nullptr;
  size_t bytes_ = 0;
};

// Deterministic values from (seed, stream, index), cheap enough to fill gigabytes in parallel.
inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
inline float uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
  return static_cast<float>(splitmix64(seed * 0x100000001b3ULL ^ (stream << 56) ^ i) >> 40) * 0x1p-24f;
}

// Runs f(i) for i in [0, n) on all cores (setup and checks: not timed).
template <class F>
void parallel_all(int64_t n, F&& f) {
#pragma omp parallel for schedule(static) num_threads(omp_get_num_procs())
  for (int64_t i = 0; i < n; ++i) f(i);
}

// ============================================================================
// the buffer sets of one shape
// ============================================================================

}  // namespace

// ============================================================================
// the buffer sets of one shape (bench_internal.h)
// ============================================================================

namespace detail {

int64_t Pool::floats_needed(const NormShape& s, int64_t sets, bool with_sum) {
  return 4 * padded(s.d) + sets * ((with_sum ? 4 : 3) * padded(s.numel()) + 5 * padded(s.rows()));
}

Pool::Pool(float* memory, const NormShape& s, int64_t sets, bool with_sum, uint64_t seed, float ln_eps, float rms_eps)
    : shape_(s), ln_eps_(ln_eps), rms_eps_(rms_eps) {
  const int64_t nd = s.numel(), n = s.rows(), d = s.d;
  float* p = memory;
  auto take = [&](int64_t floats) {
    float* q = p;
    p += padded(floats);
    return q;
  };
  gamma_ = take(d);
  beta_ = take(d);
  dgamma_ = take(d);
  dbeta_ = take(d);
  for (int64_t j = 0; j < d; ++j) {
    gamma_[j] = 0.5f + uniform01(seed, 1, static_cast<uint64_t>(j));
    beta_[j] = uniform01(seed, 2, static_cast<uint64_t>(j)) - 0.5f;
    dgamma_[j] = dbeta_[j] = 0.0f;
  }
  for (int64_t k = 0; k < sets; ++k) {
    BufferSet b;
    b.x = take(nd);
    b.dy = take(nd);
    b.out = take(nd);
    if (with_sum) b.sum = take(nd);
    b.out_mean = take(n);
    b.out_rstd = take(n);
    b.ln_mean = take(n);
    b.ln_rstd = take(n);
    b.rms_rstd = take(n);
    sets_.push_back(b);
  }
  // All rows of all sets in one parallel region (thousands of small sets otherwise pay a
  // fork/join each, which is slow when other processes hold the cores).
  parallel_all(sets * n, [&](int64_t r) {
    const BufferSet& b = sets_[static_cast<size_t>(r / n)];
    fill_row(b, seed + static_cast<uint64_t>(r / n) * 7919, r % n);
    save_stats_row(b, r % n);
  });
}

void Pool::round_inputs(float (*round)(float)) {
  const int64_t n = shape_.rows(), d = shape_.d, sets = size();
  for (int64_t j = 0; j < d; ++j) {
    gamma_[j] = round(gamma_[j]);
    beta_[j] = round(beta_[j]);
  }
  parallel_all(sets * n, [&](int64_t r) {
    const BufferSet& b = sets_[static_cast<size_t>(r / n)];
    const int64_t i = r % n;
    for (int64_t j = i * d; j < (i + 1) * d; ++j) {
      b.x[j] = round(b.x[j]);
      b.dy[j] = round(b.dy[j]);
    }
    save_stats_row(b, i);
  });
}

// x[i,j] = off_i + scale_i * u, u uniform with variance 1, off_i in [-1, 1), scale_i in
// [0.5, 2); dy uniform in [-1, 1). Every array is written here (first touch: no page faults
// while timing).
void Pool::fill_row(const BufferSet& b, uint64_t seed, int64_t i) {
  const int64_t d = shape_.d;
  const uint64_t r = static_cast<uint64_t>(i);
  const float off = 2.0f * uniform01(seed, 3, r) - 1.0f;
  const float scale = 0.5f + 1.5f * uniform01(seed, 4, r);
  float* xr = b.x + i * d;
  float* dyr = b.dy + i * d;
  for (int64_t j = 0; j < d; ++j) {
    const uint64_t e = r * static_cast<uint64_t>(d) + static_cast<uint64_t>(j);
    xr[j] = off + scale * 1.7320508f * (2.0f * uniform01(seed, 5, e) - 1.0f);
    dyr[j] = 2.0f * uniform01(seed, 6, e) - 1.0f;
    if (b.sum) b.sum[i * d + j] = 0.0f;
  }
  b.out_mean[i] = 0.0f;
  b.out_rstd[i] = 0.0f;
}

// The saved statistics of row i: the reference forwards of x (they write their y into `out`,
// overwritten by every call later).
void Pool::save_stats_row(const BufferSet& b, int64_t i) {
  const int64_t d = shape_.d;
  const float* xr = b.x + i * d;
  float* outr = b.out + i * d;
  layernorm_forward_ref<float>(outr, b.ln_mean + i, b.ln_rstd + i, xr, gamma_, beta_, 1, d, ln_eps_);
  rmsnorm_forward_ref<float>(outr, b.rms_rstd + i, xr, gamma_, 1, d, rms_eps_);
}

NormArgs args_for(const Pool& pool, int64_t k, NormKind norm, Pass pass, float eps, float alpha) {
  const BufferSet& b = pool.set(k);
  const bool ln = norm == NormKind::layernorm;
  NormArgs a;
  a.n = pool.shape().rows();
  a.d = pool.shape().d;
  a.eps = eps;
  a.x = b.x;
  a.gamma = pool.gamma();
  if (detail::is_squash(norm)) {  // gamma, beta, alpha (0.5), Derf's shift; no statistics
    a.beta = pool.beta();
    // Derf's shift away from its init (0), so that a kernel that drops it fails the check.
    if (norm == NormKind::derf) a.derf_shift = 0.25f;
    if (pass == Pass::bwd) {
      a.dy = b.dy;
      a.dx = b.out;
      a.dgamma = pool.dgamma();
      a.dbeta = pool.dbeta();
      a.dalpha = pool.dalpha();
      if (norm == NormKind::derf) a.dshift = pool.dshift();
    } else {
      a.y = b.out;
    }
    return a;
  }
  a.beta = ln ? pool.beta() : nullptr;
  if (pass == Pass::fwd || pass == Pass::addfwd) {
    a.y = b.out;
    a.mean = ln ? b.out_mean : nullptr;
    a.rstd = b.out_rstd;
    if (pass == Pass::addfwd) {
      a.branch = b.dy;
      a.alpha = alpha;
      a.s = b.sum;
    }
  } else {
    a.dy = b.dy;
    a.saved_mean = ln ? b.ln_mean : nullptr;
    a.saved_rstd = ln ? b.ln_rstd : b.rms_rstd;
    a.dx = b.out;
    a.dgamma = pool.dgamma();
    a.dbeta = ln ? pool.dbeta() : nullptr;
  }
  return a;
}

}  // namespace detail

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

// Tolerances, per output, with their reasons. The reference is exact to float rounding (it
// computes in float64); a correct float32 kernel differs by its own rounding:
// - y, dx: O(1) values from a handful of float operations after two row reductions over d
//   (<= 8192 terms). A plain sequential float sum (the multipass kernels) errs by ~sqrt(d) ulp
//   typically, d ulp at worst (5e-4 relative at d = 8192); blocked/vector sums by far less.
//   rtol 1e-4 covers the typical case with margin; atol 1e-4 covers values near 0, where the
//   error of the row statistics (times |xhat| <= ~4) dominates.
// - mean, rstd: one reduction each: atol 1e-5, rtol 1e-4.
// - dgamma, dbeta: a sum over N rows (up to 32768 and more) of terms of both signs. The error
//   of a float sum scales with the magnitude it passes through, sum_rows |term|, not with the
//   (much smaller, cancelling) result: atol 1e-5 relative to sum_rows |term| (a sequential
//   sum's typical error is ~sqrt(N) ulp of that), rtol 1e-4.
// - s = alpha*a + b (the add+norm forward): one FMA (or a product and a sum) per element,
//   <= 1 ulp each of the magnitude it passed through, |alpha*a| + |b| (not of |s|, which
//   cancels): atol 1e-6 relative to that (16 ulp), rtol 0.
// - an output stored as bf16 or fp16 (y, dx, s of a kernel with --precision bf16 or fp16; the
//   reference then reads the 16-bit inputs the kernel holds) is rounded once more, to 8 (11)
//   significant bits: half an ulp is at most 2^-8 (2^-11) of the value, added to the rtol above. Statistics and parameter
//   gradients are float32 there too: their tolerances stay.
// A wrong kernel (a missing term, a wrong row, an output not written) is off by O(1) relative.
struct Tolerance {
  double atol, rtol;
};
constexpr Tolerance kTolRow{1e-4, 1e-4};
constexpr Tolerance kTolStat{1e-5, 1e-4};
constexpr Tolerance kTolParam{1e-5, 1e-4};
constexpr Tolerance kTolSum{1e-6, 0};

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

void fill_nan(float* p, int64_t n) {
  if (!p) return;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  parallel_all(n, [&](int64_t i) { p[i] = nan; });
}

}  // namespace

VerifyResult verify_norm(const NormImpl& impl, Pass pass, const NormArgs& a) {
  const NormFn& fn = impl.fn(pass);
  NL_CHECK(static_cast<bool>(fn), "{} has no {} pass", impl.name(), to_string(pass));
  // Half an ulp of the format an output is stored in, relative: 2^-8 (bf16), 2^-11 (fp16).
  const Precision stored = detail::storage_of(impl.dtype);
  const double stored_rtol = stored == Precision::fp32 ? 0.0 : 0.5 * format_info(stored).epsilon;
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

// ============================================================================
// the timing loop
// ============================================================================

namespace detail {

int64_t working_set(const NormRow& r, int64_t sets) {
  // Everything with N rows that one call touches, times the sets it rotates over.
  return (r.bytes.data + r.bytes.stats) * sets;
}

std::string mib(int64_t bytes) { return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20)); }

NormRow case_row(const std::string& norm, const std::string& impl, const std::string& provider, const std::string& pass,
                 const NormShape& shape, const RowPlace& place, int64_t sets, int64_t resident_below) {
  NormRow r;
  r.norm = norm;
  r.impl = impl;
  r.provider = provider;
  r.pass = pass;
  r.shape = shape;
  r.threads = place.threads;
  r.resident = place.resident;
  r.device = place.device;
  r.dtype = place.dtype;
  r.bytes = norm_bytes(norm, pass, shape, storage_of(place.dtype) == Precision::fp32 ? 4 : 2);
  r.parameters = norm_parameters(norm, shape.d);
  r.working_set_bytes = working_set(r, sets);
  r.cache_resident = r.working_set_bytes < resident_below;
  return r;
}

int64_t sets_for(const NormShape& s, int64_t footprint, int64_t stored_bytes) {
  const int64_t per_set = 2 * s.numel() * stored_bytes;  // x + y of a forward: the smallest case footprint
  return std::max<int64_t>(1, (footprint + per_set - 1) / per_set);
}

int64_t footprint_of(const NormBenchOptions& opt, int64_t llc) {
  return opt.footprint > 0 ? opt.footprint : detail::cache_resident_below(llc);
}

}  // namespace detail

namespace {

using detail::Case;
using detail::mib;
using detail::sets_for;
using detail::footprint_of;
using detail::working_set;

int64_t pool_bytes(const NormShape& s, int64_t sets, bool with_sum) {
  return Pool::floats_needed(s, sets, with_sum) * 4;
}

// A resident call takes a few microseconds: one sample is a batch of calls lasting about this
// long, so that the clock's resolution and cost (tens of nanoseconds) stay far below 1% of it,
// while a sample remains short enough that few are hit by an interrupt (the median drops those).
constexpr double kResidentSample = 200e-6;
constexpr int64_t kMaxBatch = 100000;

// Calls per sample for a resident case: from the fastest of three single calls (after warm-up).
int64_t batch_for(const Case& c) {
  double fastest = INFINITY;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    c.call(0);
    fastest = std::min(fastest, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (!(fastest > 0)) return kMaxBatch;
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(kResidentSample / fastest)), 1, kMaxBatch);
}

// One (shape, kind) of the run: memory-bound shapes rotate through `sets` buffer sets, resident
// ones reuse one.
struct ShapeGroup {
  NormShape shape;
  bool resident = false;
  int64_t sets = 1;
};

}  // namespace

namespace detail {

void time_cases(std::vector<Case>& cases, int64_t sets, bool resident, const NormBenchOptions& opt,
                NormReport& report) {
  // Warm-up, then the cases in turn, one sample each, each call on the next buffer set, until
  // every case has its repeats and its min-time: drift (other tenants, clocks) then hits all
  // cases alike, and their ratios are measured side by side.
  int64_t next = 0;
  auto next_set = [&] { return next++ % sets; };
  for (int64_t w = 0; w < opt.warmup; ++w)
    for (Case& c : cases)
      if (c.row.status == "ok") c.call(next_set());
  if (resident)
    for (Case& c : cases)
      if (c.row.status == "ok" && !c.timed_call) c.batch = batch_for(c);
  constexpr int64_t kMaxSamples = 1000000;
  bool running = true;
  while (running) {
    running = false;
    for (Case& c : cases) {
      if (c.row.status != "ok" || c.done) continue;
      const int64_t k = next_set();
      double s = 0;
      if (c.timed_call) {
        s = c.timed_call(k);
      } else {
        const auto t0 = Clock::now();
        for (int64_t b = 0; b < c.batch; ++b) c.call(k);
        s = std::chrono::duration<double>(Clock::now() - t0).count();
      }
      c.samples.push_back(s / static_cast<double>(c.batch));
      c.timed += s;
      const int64_t n = static_cast<int64_t>(c.samples.size());
      c.done = (n >= opt.repeats && c.timed >= opt.min_time) || n >= kMaxSamples;
      running = running || !c.done;
    }
  }
  for (Case& c : cases) {
    c.row.time = summarize(c.samples);
    c.row.calls_per_sample = c.batch;
    if (opt.log)
      opt.log(fmt::format("{}: median {:.2f} us over {} samples of {} call(s)", c.row.name(),
                          c.row.time.median * 1e6, c.row.time.samples, c.batch));
    report.rows.push_back(std::move(c.row));
  }
}

void add_row_warnings(NormReport& report, int64_t resident_below) {
  // Resident rows are in the caches on purpose; a memory-bound row there by accident is not.
  int short_rotation = 0;
  for (const NormRow& r : report.rows) short_rotation += r.cache_resident && !r.resident ? 1 : 0;
  if (short_rotation > 0)
    report.warnings.push_back(fmt::format(
        "{} row(s) rotate through less than {} (working set in the ws column, marked *): they may run at cache "
        "speed, not memory speed; use --footprint-mib 0 (automatic) for memory-bound figures",
        short_rotation, mib(resident_below)));
  std::vector<std::string> noisy;
  for (const NormRow& r : report.rows)
    if (r.status == "ok" && r.time.cv() > 0.10) noisy.push_back(fmt::format("{} ({:.0f}%)", r.name(), 100 * r.time.cv()));
  if (!noisy.empty()) report.warnings.push_back(noisy_rows_warning(noisy, "1"));
  int rejected = 0;
  for (const NormRow& r : report.rows) rejected += r.status == "rejected" ? 1 : 0;
  if (rejected > 0)
    report.warnings.push_back(fmt::format("{} implementation(s) failed the check against the reference and were "
                                          "not timed (status 'rejected')",
                                          rejected));
}

}  // namespace detail

void validate(const NormBenchOptions& opt) {
  const bool device = opt.device != "cpu";
  NL_USAGE(opt.device == "cpu" || opt.device == "cuda" || opt.device == "cuda-sim",
           "--device must be cpu, cuda or cuda-sim, got '{}'", shown(opt.device));
  NL_USAGE(!opt.dtypes.empty(), "--precision: no format given (fp32, bf16, fp16)");
  for (const std::string& t : opt.dtypes) {
    NL_USAGE(t == "f32" || t == "bf16" || t == "fp16", "--precision: '{}' is not fp32, bf16 or fp16", shown(t));
  }
  NL_USAGE(!device || opt.resident_shapes.empty(),
           "--resident-shapes: the cpu's caches only; --device {} takes --shapes", opt.device);
  NL_USAGE(opt.fwd || opt.bwd || std::find(opt.dtypes.begin(), opt.dtypes.end(), "f32") != opt.dtypes.end(),
           "--pass addfwd: no bf16 or fp16 rows (the 16-bit kernels have no fused add+norm); add --precision fp32");
  NL_USAGE(!opt.shapes.empty() || !opt.resident_shapes.empty(), "--shapes: no shape given");
  NL_USAGE(opt.fwd || opt.bwd || opt.addfwd, "--pass: nothing to run (fwd, bwd, addfwd or all)");
  NL_USAGE(opt.warmup >= 0, "--warmup must be >= 0, got {}", opt.warmup);
  NL_USAGE(opt.repeats >= 1, "--repeats must be >= 1, got {}", opt.repeats);
  NL_USAGE(opt.min_time >= 0 && std::isfinite(opt.min_time), "--min-time must be >= 0 seconds, got {}", opt.min_time);
  NL_USAGE(opt.footprint >= 0, "--footprint-mib must be >= 0 (0: automatic), got {}", opt.footprint >> 20);
  NL_USAGE(std::isfinite(opt.add_alpha), "the add+norm alpha must be finite, got {}", opt.add_alpha);
  for (int t : opt.threads) NL_USAGE(t >= 1, "--threads: {} is not a thread count", t);
  // One buffer set is all a shape cannot do without: it may take more than the planning budget
  // (system.h's kMemoryBudgetShare, which the rotation's extra sets stay within) but not this.
  constexpr double kOneSetShare = 0.8;
  const int64_t avail = available_memory_bytes();
  for (const auto* list : {&opt.shapes, &opt.resident_shapes}) {
    for (const NormShape& s : *list) {
      // One set is the least a shape needs; the rotation adds sets up to the footprint, and
      // shrinks to fewer sets when memory is short (then the rows say cache-resident if it is).
      const int64_t one = pool_bytes(s, 1, opt.addfwd);
      NL_USAGE(avail <= 0 || static_cast<double>(one) <= kOneSetShare * static_cast<double>(avail),
               "{}: {} needs {} for one set of buffers (x, dy, out{}), more than {:.0f}% of the {} of memory "
               "available: too large for memory",
               list == &opt.shapes ? "--shapes" : "--resident-shapes", s.str(), mib(one), opt.addfwd ? ", s" : "",
               100 * kOneSetShare, mib(avail));
    }
  }
}

NormReport run_norm_bench(const NormBenchOptions& opt, const NormRegistry& registry) {
  if (opt.device != "cpu") return detail::run_device_norm_bench(opt);
  validate(opt);
  NormReport report;
  report.context = collect_context();
  const int64_t footprint = footprint_of(opt, report.context.llc_bytes);
  report.context.footprint_target = footprint;
  const int64_t resident_below = detail::cache_resident_below(report.context.llc_bytes);
  const std::vector<const NormImpl*> impls = registry.select(opt.impls);
  std::vector<int> threads = opt.threads;
  if (threads.empty()) threads = parse_threads("1,all");
  std::vector<Pass> passes;
  if (opt.fwd) passes.push_back(Pass::fwd);
  if (opt.bwd) passes.push_back(Pass::bwd);
  bool with_sum = false;  // the pools need s only when an add+norm forward runs
  if (opt.addfwd) {
    passes.push_back(Pass::addfwd);
    for (const NormImpl* m : impls) with_sum = with_sum || static_cast<bool>(m->add_forward);
  }
  auto log = [&](const std::string& s) {
    if (opt.log) opt.log(s);
  };
  detail::RunFrame frame(report.context, threads);
  const int64_t budget = memory_budget_bytes();

  // Buffer sets per shape, and one block of memory for the largest pool, reused by all shapes.
  std::vector<ShapeGroup> groups;
  int64_t most = 0;
  for (const NormShape& shape : opt.shapes) {
    int64_t sets = sets_for(shape, footprint);
    // Less rotation rather than swapping: keep the pool within the memory budget.
    while (sets > 1 && budget > 0 && pool_bytes(shape, sets, with_sum) > budget) --sets;
    groups.push_back({shape, false, sets});
  }
  for (const NormShape& shape : opt.resident_shapes) groups.push_back({shape, true, 1});
  for (const ShapeGroup& g : groups) most = std::max(most, pool_bytes(g.shape, g.sets, with_sum));
  Block memory(static_cast<size_t>(most / 4));

  for (const ShapeGroup& group : groups) {
    const NormShape& shape = group.shape;
    const int64_t sets = group.sets;
    log(fmt::format("{}{}: {} buffer set(s), {} in all", shape.str(), group.resident ? " (resident)" : "", sets,
                    mib(pool_bytes(shape, sets, with_sum))));
    Pool pool(memory.get(), shape, sets, with_sum, opt.seed, opt.ln_eps, opt.rms_eps);
    const int64_t nd = shape.numel();
    // The 16-bit rows' own sets: as many as give them the same footprint in bytes.
    std::vector<std::unique_ptr<detail::Pool16>> pools16;
    for (const std::string& dtype : opt.dtypes) {
      if (dtype == "f32" || !(opt.fwd || opt.bwd)) continue;
      int64_t sets16 = group.resident ? 1 : sets_for(shape, footprint, 2);
      while (sets16 > 1 && budget > 0 && detail::Pool16::bytes(shape, sets16) > budget) --sets16;
      log(fmt::format("{} {}: {} buffer set(s), {} in all", shape.str(), dtype, sets16,
                      mib(detail::Pool16::bytes(shape, sets16))));
      pools16.push_back(std::make_unique<detail::Pool16>(detail::storage_of(dtype), shape, sets16, opt.seed, opt.ln_eps,
                                                         opt.rms_eps));
    }

    for (int t : threads) {
      set_num_threads(t);
      std::vector<Case> cases;
      detail::RowPlace place;
      place.threads = t;
      place.resident = group.resident;
      auto base_row = [&](const std::string& norm, const std::string& impl, const std::string& provider,
                          const std::string& pass) {
        return detail::case_row(norm, impl, provider, pass, shape, place, sets, resident_below);
      };
      if (opt.copy_baselines) {
        for (const char* which : {"loop", "memcpy"}) {
          Case c;
          c.row = base_row("copy", which, std::string(which) == "loop" ? "normlab" : "libc", "copy");
          const bool loop = std::string(which) == "loop";
          c.call = [&pool, nd, loop](int64_t k) {
            const BufferSet& b = pool.set(k);
            loop ? detail::copy_loop(b.out, b.x, nd) : detail::copy_memcpy(b.out, b.x, nd);
          };
          // Checked as every case is: the copy must reproduce its source bit for bit.
          fill_nan(pool.set(0).out, nd);
          c.call(0);
          c.row.verify.pass = std::memcmp(pool.set(0).out, pool.set(0).x, static_cast<size_t>(nd) * 4) == 0;
          if (!c.row.verify.pass) {
            c.row.status = "rejected";
            c.row.verify.report = c.row.name() + ": the copy differs from its source";
          }
          cases.push_back(std::move(c));
        }
      }
      const bool f32_rows = std::find(opt.dtypes.begin(), opt.dtypes.end(), "f32") != opt.dtypes.end();
      for (const NormImpl* m : impls) {
        for (Pass p : passes) {
          const NormFn& fn = m->fn(p);
          if (!fn || !f32_rows) continue;
          const float eps = m->norm == NormKind::layernorm ? opt.ln_eps : opt.rms_eps;
          const NormKind norm = m->norm;
          Case c;
          c.row = base_row(to_string(norm), m->impl, m->provider, to_string(p));
          c.call = [&pool, fn, norm, p, eps, alpha = opt.add_alpha](int64_t k) {
            fn(args_for(pool, k, norm, p, eps, alpha));
          };
          // Correctness first: a wrong kernel is reported and never timed. (Its first call is also
          // where a fused kernel's shape class chooses its variant, measuring if it must.)
          c.row.verify = verify_norm(*m, p, args_for(pool, 0, norm, p, eps, opt.add_alpha));
          c.row.streaming_stores = m->streaming_stores;
          if (m->variant) {
            const RowVariant v = m->variant(p, args_for(pool, 0, norm, p, eps, opt.add_alpha));
            c.row.variant = v.name;
            c.row.variant_source = v.source;
            c.row.backend_variant = v.backend;
            c.row.streaming_stores = v.streams;
            log(fmt::format("{} {} {}: variant {} ({}){}", c.row.name(), to_string(p), shape.str(), v.name, v.source,
                            v.backend.empty() ? "" : "; the backend runs " + v.backend));
          }
          if (!c.row.verify.pass) {
            c.row.status = "rejected";
            c.row.verify.report += fmt::format(" (rerun: normlab bench norms --impl {} --pass {} --{}shapes {} --threads {})",
                                               m->name(), to_string(p), group.resident ? "resident-" : "", shape.str(), t);
            log(fmt::format("REJECTED {}: {}", c.row.name(), c.row.verify.report));
          } else {
            log(fmt::format("verified {} (max |diff| {:.2g} in {})", c.row.name(), c.row.verify.max_abs_err,
                            c.row.verify.worst_output));
          }
          cases.push_back(std::move(c));
        }
      }
      // The fused kernels over 16-bit storage, where the fused float32 kernel of the norm is
      // selected. Each case rotates through its own sets (twice as many: the same bytes).
      for (auto& p16 : pools16) {
        detail::RowPlace place16 = place;
        place16.dtype = to_string(p16->format());
        for (const NormImpl* m : impls) {
          // DyT and Derf have no 16-bit kernel here
          if (m->impl != "fused" || detail::is_squash(m->norm)) continue;
          const NormImpl m16 = p16->impl(m->norm);
          const float eps = m->norm == NormKind::layernorm ? opt.ln_eps : opt.rms_eps;
          for (Pass p : passes) {
            if (!m16.fn(p)) continue;
            Case c;
            c.row = detail::case_row(to_string(m->norm), m16.impl, m16.provider, to_string(p), shape, place16,
                                     p16->size(), resident_below);
            c.row.verify = verify_norm(m16, p, args_for(p16->source(), 0, m->norm, p, eps, opt.add_alpha));
            if (!c.row.verify.pass) {
              c.row.status = "rejected";
              c.row.verify.report += fmt::format(" (rerun: normlab bench norms --impl {} --precision {} --pass {} --{}shapes {} --threads {})",
                                                 m->name(), place16.dtype, to_string(p), group.resident ? "resident-" : "",
                                                 shape.str(), t);
              log(fmt::format("REJECTED {}: {}", c.row.name(), c.row.verify.report));
            }
            detail::Pool16* pool16 = p16.get();
            c.call = [pool16, norm = m->norm, p, eps, next = std::make_shared<int64_t>(0)](int64_t) {
              pool16->run(norm, p, (*next)++, eps);
            };
            cases.push_back(std::move(c));
          }
        }
      }

      detail::time_cases(cases, sets, group.resident, opt, report);
    }
  }
  frame.finish(report);
  detail::add_row_warnings(report, resident_below);
  return report;
}

// ============================================================================
// derived figures
// ============================================================================

void derive(NormReport& report) {
  // Rows are compared within one (shape, threads or device) and one kind: a resident row with
  // the copy of the same reused buffers, a memory-bound one with the rotated copy; a norm row
  // with the other norms of its dtype, and with the copy of whatever dtype (GB/s either way).
  auto key = [](const std::string& norm, const std::string& impl, const std::string& pass, const NormRow& like) {
    return fmt::format("{}.{}/{}/{}/{}/{}/{}/{}", norm, impl, pass, like.shape.str(), like.threads, like.resident,
                       like.device, norm == "copy" ? "" : like.dtype);
  };
  std::map<std::string, const NormRow*> index;
  for (const NormRow& r : report.rows)
    if (r.status == "ok" && r.time.median > 0) index.emplace(key(r.norm, r.impl, r.pass, r), &r);
  auto find = [&](const std::string& norm, const std::string& impl, const std::string& pass, const NormRow& like) {
    auto it = index.find(key(norm, impl, pass, like));
    return it == index.end() ? nullptr : it->second;
  };
  auto gbps = [](const NormRow& r) { return static_cast<double>(r.bytes.data) / r.time.median / 1e9; };
  std::vector<NormRow> rows = report.rows;  // derived from the measured fields of the originals
  for (NormRow& r : rows) {
    if (r.runs > 1) continue;  // medians of its runs' own figures (merge_runs)
    r.gb_per_s = r.copy_loop_gb_per_s = r.memcpy_gb_per_s = NAN;
    r.pct_of_copy_loop = r.pct_of_memcpy = r.pct_of_copy = r.rms_over_ln = r.vs_onednn = r.backend_vs_onednn =
        r.vs_torch = r.vs_unfused = NAN;
    r.pct_against = r.streaming_stores ? "memcpy" : "copy-loop";
    if (r.status != "ok" || !(r.time.median > 0)) continue;
    r.gb_per_s = gbps(r);
    if (const NormRow* c = find("copy", "loop", "copy", r)) r.copy_loop_gb_per_s = gbps(*c);
    if (const NormRow* c = find("copy", "memcpy", "copy", r)) r.memcpy_gb_per_s = gbps(*c);
    r.pct_of_copy_loop = 100.0 * r.gb_per_s / r.copy_loop_gb_per_s;
    r.pct_of_memcpy = 100.0 * r.gb_per_s / r.memcpy_gb_per_s;
    // A streaming-store kernel competes with memcpy, which streams too, unless the copy loop measured
    // faster in this run: then with the loop (held to the faster copy, the claim is never flattered).
    const bool loop_faster = r.copy_loop_gb_per_s > r.memcpy_gb_per_s || std::isnan(r.memcpy_gb_per_s);
    if (loop_faster && std::isfinite(r.copy_loop_gb_per_s)) r.pct_against = "copy-loop";
    r.pct_of_copy = r.pct_against == "memcpy" ? r.pct_of_memcpy : r.pct_of_copy_loop;
    if (r.norm == "copy") continue;
    if (r.norm == "rmsnorm")
      if (const NormRow* ln = find("layernorm", r.impl, r.pass, r)) r.rms_over_ln = ln->time.median / r.time.median;
    if (r.norm == "layernorm" && r.impl != "onednn") {
      if (const NormRow* o = find("layernorm", "onednn", r.pass, r)) r.vs_onednn = o->time.median / r.time.median;
      r.backend_vs_onednn = r.backend_variant == "onednn" ? 1.0 : r.vs_onednn;
    }
    if (r.impl != "torch")
      if (const NormRow* o = find(r.norm, "torch", r.pass, r)) r.vs_torch = o->time.median / r.time.median;
    if (r.pass == "addfwd" && r.impl != "unfused")
      if (const NormRow* o = find(r.norm, "unfused", r.pass, r)) r.vs_unfused = o->time.median / r.time.median;
  }
  report.rows = std::move(rows);
}

std::vector<std::string> norm_verdicts(const NormReport& report) {
  std::vector<std::string> misses;
  int held = 0;
  for (const NormRow& r : report.rows) {
    if (r.impl != "fused" || r.device != "cpu" || r.status != "ok" || !(r.time.median > 0)) continue;
    ++held;
    const std::string where = fmt::format("{}.{} {} {}{} thr {}", r.norm, r.impl, r.pass, r.shape.str(),
                                          r.resident ? " (resident)" : "", r.threads);
    const std::string copy = r.pct_against == "memcpy" ? "memcpy" : r.resident ? "the resident copy loop" : "the copy loop";
    std::vector<std::string> why;
    if (std::isfinite(r.pct_of_copy) && r.pct_of_copy < kCopyTargetPct)
      // One decimal where the rounded figure would read as the target itself (79.6% -> "80%").
      why.push_back(std::round(r.pct_of_copy) >= kCopyTargetPct
                        ? fmt::format("{:.1f}% of {} (target >= {:.0f}%)", r.pct_of_copy, copy, kCopyTargetPct)
                        : fmt::format("{:.0f}% of {} (target >= {:.0f}%)", r.pct_of_copy, copy, kCopyTargetPct));
    // Slower than oneDNN beyond the noise of equal kernels, and the backend does not run oneDNN
    // there instead (when it does, training gets oneDNN's speed: the target holds).
    if (r.backend_vs_onednn < 0.97)
      why.push_back(fmt::format("{:.2f}x oneDNN (target >= 1)", r.vs_onednn));
    if (!why.empty()) {
      std::string line = where + ": ";
      for (size_t i = 0; i < why.size(); ++i) line += (i ? "; " : "") + why[i];
      misses.push_back(line + (r.variant.empty() ? "" : fmt::format(" [variant {}]", r.variant)));
    }
  }
  if (held == 0) return {};
  std::vector<std::string> out;
  out.push_back(fmt::format("{} of {} fused rows meet their targets (>= {:.0f}% of the copy they are held to; "
                            "LayerNorm not slower than oneDNN){}",
                            held - static_cast<int>(misses.size()), held, kCopyTargetPct, misses.empty() ? "" : ":"));
  for (std::string& m : misses) out.push_back("  below target: " + m);
  return out;
}

// ============================================================================
// PyTorch's rows, from scripts/torch_bench.py
// ============================================================================

std::string find_torch_script() {
  std::vector<std::string> candidates = {"scripts/torch_bench.py"};
  if (const std::string exe = self_exe(); !exe.empty()) {
    const std::string dir = exe.substr(0, exe.find_last_of('/'));
    candidates.push_back(dir + "/../scripts/torch_bench.py");
    candidates.push_back(dir + "/../../scripts/torch_bench.py");
  }
  for (const std::string& c : candidates)
    if (access(c.c_str(), R_OK) == 0) return c;
  return "";
}

bool add_torch_rows(NormReport& report, const NormBenchOptions& opt, const TorchOptions& torch, std::string& why) {
  const std::string script = torch.script.empty() ? find_torch_script() : torch.script;
  if (script.empty() || access(script.c_str(), R_OK) != 0) {
    why = "scripts/torch_bench.py not found (pass --torch-script PATH)";
    return false;
  }
  if (run_child({{torch.python, "-c", "import torch"}, "", ""}) != 0) {
    why = fmt::format("{} cannot import torch (pip install torch, or --python PATH)", torch.python);
    return false;
  }
  if (opt.device == "cuda-sim") {
    why = "PyTorch has no cuda-sim: its CUDA rows need --device cuda";
    return false;
  }
  // The script has LayerNorm and RMSNorm forward and backward; no add+norm.
  if (!opt.fwd && !opt.bwd) {
    why = "PyTorch has no fused add+norm rows (--pass addfwd): run with fwd or bwd for its rows";
    return false;
  }
  std::string threads;
  std::vector<int> ts = opt.threads.empty() ? parse_threads("1,all") : opt.threads;
  for (int t : ts) threads += (threads.empty() ? "" : ",") + std::to_string(t);
  const std::string tmp = fmt::format("/tmp/normlab_torch_bench.{}.json", getpid());
  const std::string err = tmp + ".stderr";
  const bool device = opt.device != "cpu";
  const int64_t footprint = device ? detail::device_footprint(opt) : footprint_of(opt, report.context.llc_bytes);
  const int64_t resident_below = device ? detail::device_footprint(NormBenchOptions{})
                                        : detail::cache_resident_below(report.context.llc_bytes);

  // Each run of the script repeats its context's warnings: said once.
  auto warn = [&](const std::string& w) {
    if (std::find(report.warnings.begin(), report.warnings.end(), w) == report.warnings.end())
      report.warnings.push_back(w);
  };
  // One run of the script per kind of shape: memory-bound (rotated) and resident.
  auto run_script = [&](const std::vector<NormShape>& list, bool resident) {
    std::string shapes;
    for (const NormShape& s : list) shapes += (shapes.empty() ? "" : ",") + s.str();
    std::vector<std::string> argv = {torch.python,
                                     script,
                                     "--shapes",
                                     shapes,
                                     "--threads",
                                     threads,
                                     "--pass",
                                     opt.fwd && opt.bwd ? "both" : (opt.fwd ? "fwd" : "bwd"),
                                     "--warmup",
                                     std::to_string(opt.warmup),
                                     "--repeats",
                                     std::to_string(opt.repeats),
                                     "--min-time",
                                     fmt::format("{}", opt.min_time),
                                     "--footprint-bytes",
                                     std::to_string(footprint),
                                     "--cache-resident-below",
                                     std::to_string(resident_below),
                                     "--ln-eps",
                                     fmt::format("{}", opt.ln_eps),
                                     "--rms-eps",
                                     fmt::format("{}", opt.rms_eps),
                                     "--seed",
                                     std::to_string(opt.seed),
                                     "--out",
                                     tmp};
    if (resident) argv.push_back("--resident");
    std::string dtypes;
    for (const std::string& t : opt.dtypes) dtypes += (dtypes.empty() ? "" : ",") + t;
    argv.insert(argv.end(), {"--dtypes", dtypes});
    if (device) argv.insert(argv.end(), {"--device", opt.device});
    CpuUsage usage;  // whether other processes ran during PyTorch's rows too
    usage.start();
    const int rc = run_child({argv, "", err});
    Context during;
    usage.stop(during);
    if (during.others_cpu > report.context.others_cpu || std::isnan(report.context.others_cpu))
      report.context.others_cpu = during.others_cpu;
    if (during.others_cpu > 0.05)
      warn(fmt::format("other processes used {:.0f}% of the CPUs' time while PyTorch's {}rows ran: rerun them on an "
                       "idle machine",
                       100 * during.others_cpu, resident ? "resident " : ""));
    std::string err_text;
    try {
      err_text = read_file(err);
    } catch (const std::exception&) {
    }
    std::remove(err.c_str());
    if (rc != 0) {
      std::remove(tmp.c_str());
      while (!err_text.empty() && err_text.back() == '\n') err_text.pop_back();
      const auto last = err_text.find_last_of('\n');
      why = fmt::format("{} exited with status {}: {}", script, rc,
                        last == std::string::npos ? err_text : err_text.substr(last + 1));
      return false;
    }
    NormReport t = norm_report_from_json(read_file(tmp), tmp);
    std::remove(tmp.c_str());
    for (auto& [lib, version] : t.context.libraries)
      if (lib != "oneDNN") report.context.libraries[lib] = version;
    for (NormRow& r : t.rows) report.rows.push_back(std::move(r));
    for (const std::string& w : t.warnings) warn("torch_bench.py: " + w);
    return true;
  };
  const bool ok = (opt.shapes.empty() || run_script(opt.shapes, false)) &&
                  (opt.resident_shapes.empty() || run_script(opt.resident_shapes, true));
  derive(report);
  return ok;
}

}  // namespace normlab::bench
