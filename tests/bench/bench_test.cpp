// `bench`: the arithmetic of the derived figures, the check that runs before any timing (a wrong
// implementation is rejected and never timed), the resident rows and the add+norm rows, the JSON
// round trip, merging and comparing runs, the step benchmark's bookkeeping (its flop count and
// the FMA peak), and the CLI's bad-input handling. Tiny shapes, tiny min-times; no test depends
// on how fast anything runs.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "bench_internal.h"
#include "normlab/bench_kernels.h"
#include "normlab/cpu_kernels.h"
#include "test_util.h"
#include "normlab/backend.h"
#include "normlab/bench.h"
#include "normlab/error.h"
#include "normlab/kernel.h"
#include "normlab/nn.h"
#include "normlab/system.h"
#include "normlab/version.h"

using namespace normlab;
using namespace normlab::bench;
using normlab::test::describe;
using normlab::test::run_cli;

namespace {

// A quick run: tiny shapes, a 1 MiB rotation (cache-resident: fine for tests), no min-time, no
// resident shapes (their own tests add them).
NormBenchOptions quick_options() {
  NormBenchOptions o;
  o.shapes = {{2, 8, 64}, {1, 3, 67}};
  o.resident_shapes = {};
  o.threads = {1};
  o.warmup = 1;
  o.repeats = 3;
  o.min_time = 0;
  o.footprint = 1 << 20;
  return o;
}

NormRow row(const std::string& norm, const std::string& impl, const std::string& pass, double median_s,
            NormShape s = {4, 8, 16}, int threads = 1) {
  NormRow r;
  r.norm = norm;
  r.impl = impl;
  r.pass = pass;
  r.shape = s;
  r.threads = threads;
  r.bytes = norm_bytes(norm, pass, s);
  r.time = summarize({median_s});
  return r;
}

// A case's tensors as raw arrays, for the test's own (deliberately wrong) kernels.
const float* in(opcases::Tensors& t, const char* name) { return t.at(name).data<float>(); }
float* out(opcases::Tensors& t, const char* name) {
  Tensor* o = t.out(name);
  return o ? o->data<float>() : nullptr;
}
int64_t rows_of(opcases::Tensors& t) { return t.at("x").shape()[0]; }
int64_t d_of(opcases::Tensors& t) { return t.at("x").shape()[1]; }

// An implementation's pass on its op case at rows x d, checked as bench norms checks it.
opcases::CaseCheck check_impl(const NormImpl& m, Pass p, int64_t rows, int64_t d) {
  const opcases::OpCase& c = opcases::find_case(
      fmt::format("{} rows={} d={} seed=3", normlab::bench::detail::norm_op(m.norm, p), rows, d));
  if (m.backend) return opcases::check_case(c, backend("cpu"));
  const NormFn fn = m.fn(p);
  return opcases::check_case(c, backend("cpu"), Precision::fp32,
                             [&](Backend&, opcases::Tensors& t) { fn(t, c); });
}

const NormRow* find(const NormReport& r, const std::string& name) {
  for (const NormRow& x : r.rows)
    if (x.name() == name) return &x;
  return nullptr;
}

}  // namespace

// ---- parsing ---------------------------------------------------------------------------------

TEST(BenchParse, ShapesAndThreads) {
  NormShape s = parse_shape("8x256x1024");
  EXPECT_EQ(s.batch, 8);
  EXPECT_EQ(s.seq, 256);
  EXPECT_EQ(s.d, 1024);
  EXPECT_EQ(s.rows(), 2048);
  EXPECT_EQ(s.str(), "8x256x1024");
  EXPECT_EQ(parse_shapes("1x2x3,4x5x6").size(), 2u);
  EXPECT_EQ(default_shapes().size(), 4u);
  EXPECT_EQ(default_shapes().back().str(), "32x1024x4096");
  // The training step's norms (batch 32 x seq 16 = 512 rows) at d 64, 128, 256, run by default.
  ASSERT_EQ(default_resident_shapes().size(), 3u);
  for (const NormShape& r : default_resident_shapes()) EXPECT_EQ(r.rows(), 512);
  EXPECT_EQ(default_resident_shapes().front().str(), "1x512x64");
  EXPECT_EQ(default_resident_shapes().back().d, 256);
  const NormBenchOptions defaults;
  EXPECT_EQ(defaults.resident_shapes, default_resident_shapes());
  EXPECT_TRUE(defaults.addfwd);
  for (const char* bad : {"0x4x8", "-1x4x8", "4x-1x8", "axbxc", "4x8", "4x8x16x2", "", "4x8x", "4.5x8x8", "4x8x1e3",
                          "2000000x2000000x2000000"})
    EXPECT_THROW(parse_shape(bad), UsageError) << bad;
  EXPECT_THROW(parse_shapes("4x8x8,,4x8x8"), UsageError);
  const std::vector<int> t = parse_threads("1,all");
  ASSERT_GE(t.size(), 1u);
  EXPECT_EQ(t[0], 1);
  EXPECT_EQ(parse_threads("2,2,1"), (std::vector<int>{2, 1}));
  for (const char* bad : {"0", "-1", "x", "1,,2", ""}) EXPECT_THROW(parse_threads(bad), UsageError) << bad;
}

TEST(BenchParse, RegistrySelection) {
  NormRegistry r = builtin_norm_impls();
  // The cpu's own LayerNorm (oneDNN, multipass, fused, unfused), RMSNorm (multipass, fused,
  // unfused) and DyT (multipass) rows, and one backend row for every norm but LayerNorm and RMSNorm.
  const size_t others = kind_values<NormKind>().size() - 3;
  EXPECT_EQ(r.all().size(), 8u + others);
  EXPECT_EQ(r.select({"all"}).size(), 8u + others);
  EXPECT_EQ(r.select({"fused"}).size(), 2u + others);
  EXPECT_EQ(r.select({"layernorm"}).size(), 4u);
  EXPECT_EQ(r.select({"dyt"}).size(), 2u);
  EXPECT_EQ(r.select({"derf"}).size(), 1u);
  // The add+norm forward: the fused kernels have it, the unfused baseline has nothing else.
  ASSERT_EQ(r.select({"unfused"}).size(), 2u);
  for (const NormImpl* m : r.select({"unfused"})) {
    EXPECT_TRUE(m->add_forward) << m->name();
    EXPECT_FALSE(m->forward) << m->name();
    EXPECT_FALSE(m->backward) << m->name();
  }
  for (const NormImpl* m : r.select({"layernorm.fused", "rmsnorm.fused"})) EXPECT_TRUE(m->has(Pass::addfwd)) << m->name();
  // The backend's rows run their op cases: every pass that has one, no function of their own.
  size_t backend_rows = 0;
  for (const NormImpl* m : r.select({"fused"})) {
    if (m->norm == NormKind::layernorm || m->norm == NormKind::rmsnorm) continue;
    ++backend_rows;
    EXPECT_TRUE(m->backend) << m->name();
    EXPECT_TRUE(m->has(Pass::fwd) && m->has(Pass::bwd)) << m->name();
    EXPECT_FALSE(m->has(Pass::addfwd)) << m->name();  // no residual add fused into them
    EXPECT_FALSE(m->forward || m->backward) << m->name();
  }
  EXPECT_EQ(backend_rows, others);
  EXPECT_FALSE(r.select({"onednn"})[0]->has(Pass::addfwd));
  EXPECT_EQ(r.select({"rmsnorm.fused", "fused"}).size(), 2u + others);
  ASSERT_EQ(r.select({"onednn"}).size(), 1u);
  EXPECT_EQ(r.select({"onednn"})[0]->name(), "layernorm.onednn");
  EXPECT_THROW(r.select({"nope"}), UsageError);
  EXPECT_THROW(r.add(r.all()[0]), Error);  // duplicate name
}

// ---- arithmetic -------------------------------------------------------------------------------

TEST(BenchArithmetic, SummaryStatistics) {
  Stats s = summarize({3e-6, 1e-6, 2e-6});
  EXPECT_EQ(s.samples, 3);
  EXPECT_DOUBLE_EQ(s.median, 2e-6);
  EXPECT_DOUBLE_EQ(s.min, 1e-6);
  EXPECT_DOUBLE_EQ(s.max, 3e-6);
  EXPECT_DOUBLE_EQ(s.mean, 2e-6);
  EXPECT_NEAR(s.stddev, 1e-6, 1e-18);
  EXPECT_NEAR(s.cv(), 0.5, 1e-12);
  EXPECT_NEAR(s.spread(), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(summarize({4, 1, 2, 3}).median, 2.5);
  EXPECT_EQ(summarize({5}).stddev, 0.0);
  EXPECT_EQ(summarize({}).samples, 0);
  EXPECT_TRUE(std::isnan(summarize({}).median));
}

// Each tensor of the row's op case read or written once, what a 16-bit run stores at 2 bytes.
TEST(BenchArithmetic, BytesFromTheOpCase) {
  const NormShape s{2, 3, 4};  // N = 6 rows, D = 4, 24 elements, 96 bytes per N x D array
  ByteCount f = norm_bytes("layernorm", "fwd", s);
  EXPECT_EQ(f.data, 2 * 96);    // x read, y written
  EXPECT_EQ(f.params, 2 * 16);  // gamma, beta read
  EXPECT_EQ(f.stats, 2 * 24);   // mean, rstd written
  ByteCount b = norm_bytes("layernorm", "bwd", s);
  EXPECT_EQ(b.data, 3 * 96);    // x, dy read, dx written
  EXPECT_EQ(b.params, 3 * 16);  // gamma read, dgamma, dbeta written
  EXPECT_EQ(b.stats, 2 * 24);   // mean, rstd read
  EXPECT_EQ(norm_bytes("rmsnorm", "fwd", s).params, 16);
  EXPECT_EQ(norm_bytes("rmsnorm", "fwd", s).stats, 24);
  EXPECT_EQ(norm_bytes("rmsnorm", "bwd", s).params, 2 * 16);
  EXPECT_EQ(norm_bytes("rmsnorm", "bwd", s).data, 3 * 96);
  EXPECT_EQ(norm_bytes("copy", "copy", s).data, 2 * 96);
  ByteCount a = norm_bytes("layernorm", "addfwd", s);
  EXPECT_EQ(a.data, 4 * 96);    // a, b read, s, y written
  ByteCount dyt = norm_bytes("dyt", "fwd", s);
  EXPECT_EQ(dyt.params, 4 * (2 * 4 + 1));  // gamma, beta and the scalar alpha read
  EXPECT_EQ(dyt.stats, 0);                 // none: an elementwise normalizer
  EXPECT_EQ(norm_parameters("dyt", 4), 2 * 4 + 1);
  EXPECT_EQ(norm_parameters("layernorm", 4), 2 * 4);
  ByteCount half = norm_bytes("layernorm", "bwd", s, 2);
  EXPECT_EQ(half.data, 3 * 48);          // x, dy, dx in bf16
  EXPECT_EQ(half.params, 8 + 2 * 16);    // gamma in bf16, dgamma and dbeta in float32
  EXPECT_EQ(half.stats, 2 * 24);         // mean and rstd in float32
  EXPECT_EQ(a.params, 2 * 16);  // gamma, beta read
  EXPECT_EQ(a.stats, 2 * 24);   // mean, rstd written
  EXPECT_EQ(norm_bytes("rmsnorm", "addfwd", s).data, 4 * 96);
  EXPECT_EQ(norm_bytes("rmsnorm", "addfwd", s).stats, 24);
  EXPECT_EQ(norm_parameters("layernorm", 1024), 2048);
  EXPECT_EQ(norm_parameters("rmsnorm", 1024), 1024);
}

TEST(BenchArithmetic, DerivedFigures) {
  const NormShape s{4, 8, 16};  // 512 elements: 2048 bytes per array
  NormReport r;
  r.rows.push_back(row("copy", "loop", "copy", 1e-6, s));          // 4096 B / 1 us = 4.096 GB/s
  r.rows.push_back(row("copy", "memcpy", "copy", 0.5e-6, s));      // 8.192 GB/s
  r.rows.push_back(row("layernorm", "fused", "fwd", 2e-6, s));     // 2.048 GB/s
  r.rows.push_back(row("layernorm", "onednn", "fwd", 3e-6, s));
  r.rows.push_back(row("layernorm", "torch", "fwd", 5e-6, s));
  r.rows.push_back(row("rmsnorm", "fused", "fwd", 1.6e-6, s));
  r.rows.push_back(row("rmsnorm", "torch", "fwd", 4e-6, s));
  r.rows.push_back(row("layernorm", "fused", "bwd", 3e-6, s));     // 6144 B / 3 us = 2.048 GB/s
  NormRow streaming = row("rmsnorm", "stream", "fwd", 1e-6, s);
  streaming.streaming_stores = true;
  r.rows.push_back(streaming);
  NormRow rejected = row("rmsnorm", "onednn", "fwd", 1e-6, s);
  rejected.status = "rejected";
  r.rows.push_back(rejected);
  r.rows.push_back(row("layernorm", "fused", "fwd", 2e-6, s, 2));  // no copy rows at 2 threads
  derive(r);

  const NormRow* loop = find(r, "copy.loop/copy/4x8x16/threads:1");
  ASSERT_NE(loop, nullptr);
  EXPECT_NEAR(loop->gb_per_s, 4.096, 1e-9);
  EXPECT_NEAR(loop->pct_of_copy_loop, 100.0, 1e-9);
  EXPECT_NEAR(find(r, "copy.memcpy/copy/4x8x16/threads:1")->pct_of_copy_loop, 200.0, 1e-9);

  const NormRow* ln = find(r, "layernorm.fused/fwd/4x8x16/threads:1");
  EXPECT_NEAR(ln->gb_per_s, 2.048, 1e-9);
  EXPECT_NEAR(ln->copy_loop_gb_per_s, 4.096, 1e-9);
  EXPECT_NEAR(ln->memcpy_gb_per_s, 8.192, 1e-9);
  EXPECT_NEAR(ln->pct_of_copy_loop, 50.0, 1e-9);
  EXPECT_NEAR(ln->pct_of_memcpy, 25.0, 1e-9);
  EXPECT_EQ(ln->pct_against, "copy-loop");
  EXPECT_NEAR(ln->pct_of_copy, 50.0, 1e-9);
  EXPECT_NEAR(ln->vs_onednn, 1.5, 1e-12);  // oneDNN 3 us / fused 2 us
  EXPECT_NEAR(ln->vs_torch, 2.5, 1e-12);   // torch 5 us / fused 2 us
  EXPECT_TRUE(std::isnan(ln->rms_over_ln));
  EXPECT_TRUE(std::isnan(find(r, "layernorm.onednn/fwd/4x8x16/threads:1")->vs_onednn));

  const NormRow* rms = find(r, "rmsnorm.fused/fwd/4x8x16/threads:1");
  EXPECT_NEAR(rms->rms_over_ln, 2.0 / 1.6, 1e-12);  // LayerNorm fused / RMSNorm fused
  EXPECT_NEAR(rms->vs_torch, 4.0 / 1.6, 1e-12);
  EXPECT_TRUE(std::isnan(rms->vs_onednn));  // oneDNN has no RMSNorm: not compared
  EXPECT_NEAR(find(r, "rmsnorm.torch/fwd/4x8x16/threads:1")->rms_over_ln, 5.0 / 4.0, 1e-12);

  const NormRow* bwd = find(r, "layernorm.fused/bwd/4x8x16/threads:1");
  EXPECT_NEAR(bwd->gb_per_s, 2.048, 1e-9);
  EXPECT_NEAR(bwd->pct_of_copy_loop, 50.0, 1e-9);  // against the copy of the same shape and threads

  const NormRow* st = find(r, "rmsnorm.stream/fwd/4x8x16/threads:1");
  EXPECT_EQ(st->pct_against, "memcpy");  // streaming stores: held to the faster copy
  EXPECT_NEAR(st->pct_of_copy, 50.0, 1e-9);

  // Where the copy loop measured faster than memcpy, a streaming kernel is held to the loop.
  NormReport sl;
  sl.rows.push_back(row("copy", "loop", "copy", 1e-6, s));    // 4.096 GB/s
  sl.rows.push_back(row("copy", "memcpy", "copy", 2e-6, s));  // 2.048 GB/s
  sl.rows.push_back(streaming);                               // 4.096 GB/s
  derive(sl);
  const NormRow* stl = find(sl, "rmsnorm.stream/fwd/4x8x16/threads:1");
  EXPECT_EQ(stl->pct_against, "copy-loop");
  EXPECT_NEAR(stl->pct_of_copy, 100.0, 1e-9);  // of the loop, not 200% of memcpy
  EXPECT_NEAR(stl->pct_of_memcpy, 200.0, 1e-9);

  // LayerNorm as training runs it: oneDNN's speed where the backend runs oneDNN for the class.
  EXPECT_NEAR(ln->backend_vs_onednn, 1.5, 1e-12);
  NormReport bo = r;
  for (NormRow& x : bo.rows)
    if (x.name() == "layernorm.fused/fwd/4x8x16/threads:1") x.time = summarize({6e-6}), x.backend_variant = "onednn";
  derive(bo);
  EXPECT_NEAR(find(bo, "layernorm.fused/fwd/4x8x16/threads:1")->vs_onednn, 0.5, 1e-12);
  EXPECT_NEAR(find(bo, "layernorm.fused/fwd/4x8x16/threads:1")->backend_vs_onednn, 1.0, 1e-12);
  EXPECT_TRUE(std::isnan(find(bo, "rmsnorm.fused/fwd/4x8x16/threads:1")->backend_vs_onednn));

  EXPECT_TRUE(std::isnan(find(r, "rmsnorm.onednn/fwd/4x8x16/threads:1")->gb_per_s));  // rejected: no figures
  EXPECT_TRUE(std::isnan(find(r, "layernorm.fused/fwd/4x8x16/threads:2")->pct_of_copy_loop));
  EXPECT_NEAR(find(r, "layernorm.fused/fwd/4x8x16/threads:2")->gb_per_s, 2.048, 1e-9);

  // The add+norm rows: 4ND floats per call, held to the same copy loop, against the unfused pair.
  NormReport a;
  a.rows.push_back(row("copy", "loop", "copy", 1e-6, s));           // 4.096 GB/s
  a.rows.push_back(row("rmsnorm", "fused", "addfwd", 4e-6, s));     // 8192 B / 4 us = 2.048 GB/s
  a.rows.push_back(row("rmsnorm", "unfused", "addfwd", 6e-6, s));
  a.rows.push_back(row("layernorm", "fused", "addfwd", 5e-6, s));
  derive(a);
  const NormRow* af = find(a, "rmsnorm.fused/addfwd/4x8x16/threads:1");
  EXPECT_NEAR(af->gb_per_s, 2.048, 1e-9);
  EXPECT_NEAR(af->pct_of_copy_loop, 50.0, 1e-9);
  EXPECT_NEAR(af->vs_unfused, 1.5, 1e-12);  // unfused 6 us / fused 4 us
  EXPECT_NEAR(af->rms_over_ln, 1.25, 1e-12);
  EXPECT_TRUE(std::isnan(find(a, "rmsnorm.unfused/addfwd/4x8x16/threads:1")->vs_unfused));
  EXPECT_TRUE(std::isnan(find(a, "layernorm.fused/addfwd/4x8x16/threads:1")->vs_unfused));  // no unfused LN row

  // A resident row is held to the resident copy of its shape, never to the rotated one.
  NormReport c;
  c.rows.push_back(row("copy", "loop", "copy", 1e-6, s));
  NormRow rcopy = row("copy", "loop", "copy", 0.25e-6, s);  // 16.384 GB/s from the cache
  rcopy.resident = true;
  c.rows.push_back(rcopy);
  NormRow rf = row("rmsnorm", "fused", "fwd", 0.5e-6, s);  // 8.192 GB/s
  rf.resident = true;
  c.rows.push_back(rf);
  c.rows.push_back(row("rmsnorm", "fused", "fwd", 2e-6, s));  // 2.048 GB/s
  derive(c);
  const NormRow* res = find(c, "rmsnorm.fused/fwd/4x8x16/resident/threads:1");
  ASSERT_NE(res, nullptr);
  EXPECT_NEAR(res->copy_loop_gb_per_s, 16.384, 1e-9);
  EXPECT_NEAR(res->pct_of_copy_loop, 50.0, 1e-9);
  EXPECT_NEAR(find(c, "rmsnorm.fused/fwd/4x8x16/threads:1")->pct_of_copy_loop, 50.0, 1e-9);  // 2.048 of 4.096

  // derive() is idempotent.
  NormReport again = r;
  derive(again);
  EXPECT_EQ(again.rows.size(), r.rows.size());
  EXPECT_NEAR(find(again, "rmsnorm.fused/fwd/4x8x16/threads:1")->rms_over_ln, 1.25, 1e-12);
}

TEST(BenchArithmetic, StepFigures) {
  StepReport r;
  StepRow ln, rms;
  ln.model = rms.model = "toy";
  ln.norm = "layernorm";
  rms.norm = "rmsnorm";
  ln.batch = rms.batch = 4;
  ln.seq = rms.seq = 8;
  ln.step = summarize({10e-3});
  ln.norm_kernels = summarize({2e-3});
  rms.step = summarize({9e-3});
  rms.norm_kernels = summarize({1e-3});
  r.rows = {ln, rms};
  derive(r);
  EXPECT_NEAR(r.rows[0].norm_share, 0.2, 1e-12);
  EXPECT_NEAR(r.rows[0].tokens_per_s, 32 / 10e-3, 1e-6);
  EXPECT_TRUE(std::isnan(r.rows[0].step_speedup));
  EXPECT_NEAR(r.rows[1].step_speedup, 10.0 / 9.0, 1e-12);
  EXPECT_NEAR(r.rows[1].op_speedup, 2.0, 1e-12);
  EXPECT_NEAR(r.rows[1].predicted_step_speedup, 10.0 / (10.0 - 2.0 + 1.0), 1e-12);
}

// ---- correctness before timing ------------------------------------------------------------------

// A default shape whose one buffer set and one row's check cannot fit in this machine's memory is
// left out with a warning that names it; a shape the user names is kept (validate refuses it).
// Nothing is allocated: the shapes are sized from the memory available.
TEST(BenchMemory, DefaultShapesThatCannotFitAreLeftOutNamed) {
  const int64_t avail = available_memory_bytes();
  if (avail <= 0) GTEST_SKIP() << "this system does not say how much memory is available";
  // A row's check alone is 16 doubles an element: twice the memory available at avail / 64.
  const int64_t d = 4096, rows = std::max<int64_t>(avail / 64 / d, 1);
  const NormShape huge{1, rows, d}, small{2, 16, 64};
  NormBenchOptions opt;
  opt.shapes = {small, huge};
  opt.resident_shapes = {small};
  std::vector<std::string> left_out;
  const NormBenchOptions fitted = fitted_to_memory(opt, left_out);
  ASSERT_EQ(fitted.shapes.size(), 1u);
  EXPECT_EQ(fitted.shapes[0].str(), small.str());
  EXPECT_EQ(fitted.resident_shapes.size(), 1u);
  ASSERT_EQ(left_out.size(), 1u);
  EXPECT_NE(left_out[0].find(huge.str()), std::string::npos) << left_out[0];
  EXPECT_NE(left_out[0].find("float64 check"), std::string::npos) << left_out[0];

  opt.default_shape_lists = false;  // named by the user: kept here, refused by validate
  left_out.clear();
  EXPECT_EQ(fitted_to_memory(opt, left_out).shapes.size(), 2u);
  EXPECT_TRUE(left_out.empty());
  EXPECT_THROW(validate(opt), UsageError);
}

TEST(BenchVerify, EveryBuiltinPassesAtOddSizes) {
  // 67 is not a multiple of any vector width; 15 rows are not a multiple of the row blocks.
  const NormRegistry reg = builtin_norm_impls();
  int checked = 0;
  for (const NormImpl& m : reg.all())
    for (const Pass p : {Pass::fwd, Pass::bwd, Pass::addfwd}) {
      if (!m.has(p)) continue;
      const opcases::CaseCheck c = check_impl(m, p, 15, 67);
      EXPECT_TRUE(c.pass) << m.name() << " " << to_string(p) << c.report;
      ++checked;
    }
  EXPECT_EQ(checked, 22);  // 11 implementations: 9 with fwd and bwd, 4 with addfwd (2 of them only that)
  // The 16-bit kernels on their cases stored in bf16 and fp16.
  for (const NormKind norm : {NormKind::layernorm, NormKind::rmsnorm})
    for (const Precision fmt16 : {Precision::bf16, Precision::fp16}) {
      const NormImpl m = normlab::bench::detail::norm16_impl(norm, fmt16);
      for (const Pass p : {Pass::fwd, Pass::bwd}) {
        const opcases::OpCase& c = opcases::find_case(
            fmt::format("{} rows=15 d=67 seed=3", normlab::bench::detail::norm_op(norm, p)));
        const opcases::CaseCheck k =
            opcases::check_case(c, backend("cpu"), fmt16, [&](Backend&, opcases::Tensors& t) { m.fn(p)(t, c); });
        EXPECT_TRUE(k.pass) << c.line() << " in " << to_string(fmt16) << k.report;
      }
    }
}

// DyT's rows: a kernel whose alpha gradient misses the last row is rejected, the builtins pass,
// and the summary gives DyT's speed against RMSNorm's from the same run.
TEST(BenchVerify, DytRowsAreCheckedAndComparedWithRmsNorm) {
  NormRegistry reg = builtin_norm_impls();
  NormImpl wrong;
  wrong.norm = NormKind::dyt;
  wrong.impl = "wrong";
  wrong.provider = "test";
  wrong.forward = [](opcases::Tensors& t, const opcases::OpCase&) {
    cpu::squash_forward(out(t, "y"), in(t, "x"), in(t, "alpha")[0], 0.0f, in(t, "gamma"), in(t, "beta"), rows_of(t),
                        d_of(t), Squash::tanh);
  };
  // Its alpha gradient leaves out the last row.
  wrong.backward = [](opcases::Tensors& t, const opcases::OpCase&) {
    const int64_t n = rows_of(t), d = d_of(t);
    const float alpha = in(t, "alpha")[0];
    float* dx = out(t, "dx");
    cpu::squash_backward(dx, out(t, "dalpha"), nullptr, out(t, "dgamma"), out(t, "dbeta"), in(t, "dy"), in(t, "x"),
                         alpha, 0.0f, in(t, "gamma"), n - 1, d, Squash::tanh);
    cpu::squash_backward(dx ? dx + (n - 1) * d : nullptr, nullptr, nullptr, nullptr, nullptr, in(t, "dy") + (n - 1) * d,
                         in(t, "x") + (n - 1) * d, alpha, 0.0f, in(t, "gamma"), 1, d, Squash::tanh);
  };
  reg.add(wrong);
  NormBenchOptions o = quick_options();
  o.impls = {"rmsnorm.fused", "dyt"};
  NormReport r = run_norm_bench(o, reg);
  for (const NormShape& s : o.shapes) {
    const NormRow* w = find(r, fmt::format("dyt.wrong/bwd/{}/threads:1", s.str()));
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->status, "rejected");
    EXPECT_NE(w->verify.report.find("dalpha"), std::string::npos) << w->verify.report;
    EXPECT_EQ(find(r, fmt::format("dyt.wrong/fwd/{}/threads:1", s.str()))->status, "ok");
    for (const char* name : {"dyt.fused/fwd", "dyt.fused/bwd", "dyt.multipass/fwd", "dyt.multipass/bwd"}) {
      const NormRow* x = find(r, fmt::format("{}/{}/threads:1", name, s.str()));
      ASSERT_NE(x, nullptr) << name;
      EXPECT_EQ(x->status, "ok") << x->verify.report;
      EXPECT_GT(x->gb_per_s, 0);
    }
  }
  const std::string text = render_norm_summary(r, OutputFormat::text);
  EXPECT_NE(text.find("DyT speed vs RMS"), std::string::npos) << text;
}

// Derf's rows: its shift gradient is checked (a kernel that leaves it out is rejected), with a
// shift away from its init so that erf(alpha x + s) is not odd; the summary compares it with RMSNorm.
TEST(BenchVerify, DerfRowsCheckTheShiftGradient) {
  NormRegistry reg = builtin_norm_impls();
  NormImpl wrong;
  wrong.norm = NormKind::derf;
  wrong.impl = "noshift";
  wrong.provider = "test";
  // Its forward ignores the shift (the bench's is nonzero), its backward leaves out the shift's gradient.
  wrong.forward = [](opcases::Tensors& t, const opcases::OpCase&) {
    cpu::squash_forward(out(t, "y"), in(t, "x"), in(t, "alpha")[0], 0.0f, in(t, "gamma"), in(t, "beta"), rows_of(t),
                        d_of(t), Squash::erf);
  };
  wrong.backward = [](opcases::Tensors& t, const opcases::OpCase&) {
    cpu::squash_backward(out(t, "dx"), out(t, "dalpha"), nullptr, out(t, "dgamma"), out(t, "dbeta"), in(t, "dy"),
                         in(t, "x"), in(t, "alpha")[0], in(t, "shift")[0], in(t, "gamma"), rows_of(t), d_of(t),
                         Squash::erf);
  };
  reg.add(wrong);
  NormBenchOptions o = quick_options();
  o.impls = {"rmsnorm.fused", "derf"};
  NormReport r = run_norm_bench(o, reg);
  for (const NormShape& s : o.shapes) {
    const NormRow* w = find(r, fmt::format("derf.noshift/bwd/{}/threads:1", s.str()));
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->status, "rejected");
    EXPECT_NE(w->verify.report.find("dshift"), std::string::npos) << w->verify.report;
    const NormRow* f = find(r, fmt::format("derf.noshift/fwd/{}/threads:1", s.str()));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->status, "rejected") << "a forward without the shift passed the check";
    for (const char* name : {"derf.fused/fwd", "derf.fused/bwd"}) {
      const NormRow* x = find(r, fmt::format("{}/{}/threads:1", name, s.str()));
      ASSERT_NE(x, nullptr) << name;
      EXPECT_EQ(x->status, "ok") << x->verify.report;
    }
  }
  EXPECT_NE(render_norm_summary(r, OutputFormat::text).find("Derf speed vs RMS"), std::string::npos);
  // Checked directly on Derf's case (its shift away from 0): the gradients without dshift are caught.
  const opcases::CaseCheck h = check_impl(*reg.select({"derf.noshift"})[0], Pass::bwd, 5, 67);
  EXPECT_FALSE(h.pass);
  EXPECT_NE(h.report.find("dshift"), std::string::npos) << h.report;
}

TEST(BenchVerify, WrongImplementationsAreRejectedAndNeverTimed) {
  NormRegistry reg = builtin_norm_impls();
  auto fwd_calls = std::make_shared<std::atomic<int>>(0);
  auto bwd_calls = std::make_shared<std::atomic<int>>(0);
  auto lazy_calls = std::make_shared<std::atomic<int>>(0);
  NormImpl wrong;
  wrong.norm = NormKind::layernorm;
  wrong.impl = "wrong";
  wrong.provider = "test";
  // Forward: right except one value of the last row; backward: dgamma misses the last row.
  wrong.forward = [fwd_calls](opcases::Tensors& t, const opcases::OpCase& c) {
    ++*fwd_calls;
    const int64_t n = rows_of(t), d = d_of(t);
    cpu::layernorm_forward_onepass(out(t, "y"), out(t, "mean"), out(t, "rstd"), in(t, "x"), in(t, "gamma"),
                                   in(t, "beta"), n, d, static_cast<float>(c.number("eps")));
    out(t, "y")[n * d - 1] += 0.01f;
  };
  wrong.backward = [bwd_calls](opcases::Tensors& t, const opcases::OpCase&) {
    ++*bwd_calls;
    const int64_t n = rows_of(t), d = d_of(t);
    float* dx = out(t, "dx");
    cpu::layernorm_backward_onepass(dx, out(t, "dgamma"), out(t, "dbeta"), in(t, "dy"), in(t, "x"), in(t, "gamma"),
                                    in(t, "mean"), in(t, "rstd"), n - 1, d);
    cpu::layernorm_backward_onepass(dx ? dx + (n - 1) * d : nullptr, nullptr, nullptr, in(t, "dy") + (n - 1) * d,
                                    in(t, "x") + (n - 1) * d, in(t, "gamma"), in(t, "mean") + n - 1,
                                    in(t, "rstd") + n - 1, 1, d);
  };
  reg.add(wrong);
  NormImpl lazy;  // writes nothing at all
  lazy.norm = NormKind::rmsnorm;
  lazy.impl = "lazy";
  lazy.provider = "test";
  lazy.forward = [lazy_calls](opcases::Tensors&, const opcases::OpCase&) { ++*lazy_calls; };
  reg.add(lazy);

  NormBenchOptions o = quick_options();
  o.impls = {"fused", "wrong", "lazy"};
  NormReport r = run_norm_bench(o, reg);

  for (const NormShape& s : o.shapes) {
    for (const char* name : {"layernorm.wrong/fwd", "layernorm.wrong/bwd", "rmsnorm.lazy/fwd"}) {
      const NormRow* x = find(r, fmt::format("{}/{}/threads:1", name, s.str()));
      ASSERT_NE(x, nullptr) << name;
      EXPECT_EQ(x->status, "rejected") << name;
      EXPECT_FALSE(x->verify.pass);
      EXPECT_FALSE(x->verify.report.empty());
      EXPECT_EQ(x->time.samples, 0) << name << " was timed";
      EXPECT_TRUE(std::isnan(x->gb_per_s));
    }
    for (const char* name : {"layernorm.fused/fwd", "layernorm.fused/bwd", "rmsnorm.fused/fwd", "rmsnorm.fused/bwd"}) {
      const NormRow* x = find(r, fmt::format("{}/{}/threads:1", name, s.str()));
      ASSERT_NE(x, nullptr) << name;
      EXPECT_EQ(x->status, "ok") << x->verify.report;
      EXPECT_TRUE(x->verify.pass);
      EXPECT_GE(x->time.samples, 3);
      EXPECT_GT(x->gb_per_s, 0);
      EXPECT_GT(x->pct_of_copy_loop, 0);
    }
  }
  // Each wrong kernel ran exactly once per shape: its check. No warm-up, no timed call.
  EXPECT_EQ(fwd_calls->load(), 2);
  EXPECT_EQ(bwd_calls->load(), 2);
  EXPECT_EQ(lazy_calls->load(), 2);
  EXPECT_NE(r.rows.size(), 0u);
  bool warned = false;
  for (const std::string& w : r.warnings) warned = warned || w.find("failed the check") != std::string::npos;
  EXPECT_TRUE(warned);
  // The mismatch report shows values side by side and the largest difference.
  const NormRow* x = find(r, "layernorm.wrong/fwd/2x8x64/threads:1");
  EXPECT_NE(x->verify.report.find("got"), std::string::npos) << x->verify.report;
  EXPECT_NE(x->verify.report.find("reference"), std::string::npos);
  EXPECT_NE(find(r, "layernorm.wrong/bwd/2x8x64/threads:1")->verify.report.find("dgamma"), std::string::npos);
}

TEST(BenchVerify, WrongAddNormIsRejectedAndNeverTimed) {
  NormRegistry reg = builtin_norm_impls();
  auto calls = std::make_shared<std::atomic<int>>(0);
  // Three ways to get s = alpha*a + b, y = norm(s) wrong, each caught by a different output.
  NormImpl no_alpha;  // s = a + b: Post-LN's add where DeepNorm's was asked
  no_alpha.norm = NormKind::rmsnorm;
  no_alpha.impl = "noalpha";
  no_alpha.provider = "test";
  no_alpha.add_forward = [calls](opcases::Tensors& t, const opcases::OpCase& c) {
    ++*calls;
    cpu::add_rmsnorm_forward_fused(out(t, "s"), out(t, "y"), out(t, "rstd"), in(t, "a"), in(t, "x"), 1.0f,
                                   in(t, "gamma"), rows_of(t), d_of(t), static_cast<float>(c.number("eps")));
  };
  reg.add(no_alpha);
  NormImpl norm_of_a;  // s right, but y the norm of a instead of s
  norm_of_a.norm = NormKind::layernorm;
  norm_of_a.impl = "normofa";
  norm_of_a.provider = "test";
  norm_of_a.add_forward = [calls](opcases::Tensors& t, const opcases::OpCase& c) {
    ++*calls;
    const int64_t n = rows_of(t), d = d_of(t);
    const float alpha = static_cast<float>(c.number("alpha"));
    for (int64_t i = 0; i < n * d; ++i) out(t, "s")[i] = alpha * in(t, "a")[i] + in(t, "x")[i];
    cpu::layernorm_forward_onepass(out(t, "y"), out(t, "mean"), out(t, "rstd"), in(t, "a"), in(t, "gamma"),
                                   in(t, "beta"), n, d, static_cast<float>(c.number("eps")));
  };
  reg.add(norm_of_a);
  NormImpl no_sum;  // y right, s never written (the residual stream lost)
  no_sum.norm = NormKind::rmsnorm;
  no_sum.impl = "nosum";
  no_sum.provider = "test";
  no_sum.add_forward = [calls](opcases::Tensors& t, const opcases::OpCase& c) {
    ++*calls;
    std::vector<float> sum(static_cast<size_t>(rows_of(t) * d_of(t)));
    cpu::add_rmsnorm_forward_fused(sum.data(), out(t, "y"), out(t, "rstd"), in(t, "a"), in(t, "x"),
                                   static_cast<float>(c.number("alpha")), in(t, "gamma"), rows_of(t), d_of(t),
                                   static_cast<float>(c.number("eps")));
  };
  reg.add(no_sum);

  NormBenchOptions o = quick_options();
  o.resident_shapes = {{1, 16, 24}};
  o.impls = {"fused", "unfused", "noalpha", "normofa", "nosum"};
  o.fwd = o.bwd = false;
  NormReport r = run_norm_bench(o, reg);
  // Per shape: copy.loop, copy.memcpy, seven add+norm rows (fused, unfused, three wrong ones) and
  // the own copies of the four that passed their check.
  EXPECT_EQ(r.rows.size(), 3u * 13u);
  int rejected = 0;
  for (const NormRow& x : r.rows) {
    if (x.impl == "noalpha" || x.impl == "normofa" || x.impl == "nosum") {
      ++rejected;
      EXPECT_EQ(x.status, "rejected") << x.name();
      EXPECT_EQ(x.time.samples, 0) << x.name() << " was timed";
      EXPECT_NE(x.verify.report.find(x.impl == "normofa" ? "\n  y: " : "\n  s: "), std::string::npos)
          << x.verify.report;
      if (x.impl == "nosum") {
        EXPECT_EQ(x.verify.worst_output, "s");
      }
    } else {
      EXPECT_EQ(x.status, "ok") << x.name() << ": " << x.verify.report;
      EXPECT_GE(x.time.samples, 3) << x.name();
    }
    if (x.impl == "fused") {
      EXPECT_GT(x.vs_unfused, 0) << x.name();
    }
  }
  EXPECT_EQ(rejected, 3 * 3);
  EXPECT_EQ(calls->load(), 3 * 3);  // each wrong kernel ran once per shape: its check
  const NormRow* bad = find(r, "rmsnorm.noalpha/addfwd/1x16x24/resident/threads:1");
  ASSERT_NE(bad, nullptr);
  EXPECT_NE(bad->verify.report.find("--resident-shapes 1x16x24"), std::string::npos) << bad->verify.report;
}

// The fused rows say which variant ran and why, and whether it streamed its output (then they are
// held to memcpy): forced to a streaming variant, every fused row of whole-vector rows streams;
// to an ordinary one, none does. The multipass rows have no variant and never stream. The
// report's context lists the shape classes' choices.
TEST(BenchVerify, FusedRowsSayWhichVariantRan) {
  for (const char* forced : {"tiled-2048+nt", "pipelined-pf2"}) {
    setenv("NORMLAB_NORM_VARIANT", forced, 1);
    cpu::reset_norm_choices();
    NormBenchOptions o = quick_options();
    o.shapes = {{1, 16, 64}};
    o.resident_shapes = {};
    o.impls = {"layernorm", "rmsnorm"};
    NormReport r = run_norm_bench(o);
    unsetenv("NORMLAB_NORM_VARIANT");
    cpu::reset_norm_choices();
    const bool streams = std::string(forced).find("+nt") != std::string::npos;
    int fused = 0;
    for (const NormRow& x : r.rows) {
      if (x.norm == "copy") continue;
      EXPECT_EQ(x.status, "ok") << x.name() << ": " << x.verify.report;
      const bool expect = x.impl == "fused" && streams;
      fused += x.impl == "fused";
      EXPECT_EQ(x.streaming_stores, expect) << x.name();
      // Every row is held to its own copy, which stores as the row's kernel does.
      EXPECT_EQ(x.pct_against, "own-copy") << x.name();
      EXPECT_DOUBLE_EQ(x.pct_of_copy, x.pct_of_own_copy) << x.name();
      NormRow twin = x;
      twin.norm = "copy";
      twin.impl = own_copy_impl(x);
      const NormRow* own = find(r, twin.name());
      ASSERT_NE(own, nullptr) << twin.name();
      EXPECT_EQ(own->streaming_stores, expect) << own->name();
      EXPECT_EQ(own->bytes.data, x.bytes.data) << own->name();
      EXPECT_EQ(own->working_set_bytes, x.working_set_bytes) << own->name();
      EXPECT_EQ(x.variant, x.impl == "fused" ? forced : "") << x.name();
      if (x.impl == "fused") {
        EXPECT_EQ(x.variant_source, fmt::format("forced (NORMLAB_NORM_VARIANT={})", forced));
      }
    }
    EXPECT_EQ(fused, 6);  // 2 norms x (fwd, bwd, addfwd)
    EXPECT_EQ(r.context.kernel_choices.size(), 6u) << forced;  // 2 norms x (fwd, bwd, addfwd)
    for (const KernelChoiceRecord& k : r.context.kernel_choices) EXPECT_EQ(k.fused, forced) << k.shape_class;
    // The JSON keeps the variants, and the text shows them.
    const NormReport back = norm_report_from_json(render(r, OutputFormat::json), "test");
    EXPECT_EQ(back.context.kernel_choices.size(), 6u);
    for (const NormRow& x : back.rows) EXPECT_EQ(x.variant, x.impl == "fused" ? forced : "") << x.name();
    EXPECT_NE(render(r, OutputFormat::text).find(std::string(forced) + " (forced)"), std::string::npos);
    EXPECT_NE(render_kernel_choices(r.context, OutputFormat::text, false).find("layernorm_forward d=64"), std::string::npos);
  }
}

// The verdict lines hold every fused cpu row to its targets and name the rows that miss them.
TEST(BenchVerify, VerdictsNameTheRowsBelowTarget) {
  NormReport r;
  auto row = [](const std::string& norm, const std::string& impl, double pct, double vs_onednn,
                const std::string& backend) {
    NormRow x;
    x.norm = norm;
    x.impl = impl;
    x.pass = "fwd";
    x.shape = {1, 16, 64};
    x.time.median = 1e-3;
    x.pct_against = "copy-loop";
    x.pct_of_copy_loop = x.pct_of_copy = pct;
    x.vs_onednn = vs_onednn;
    x.backend_variant = backend;
    x.backend_vs_onednn = backend == "onednn" ? 1.0 : vs_onednn;  // as derive() sets it
    return x;
  };
  // The third is slower than oneDNN, but the backend runs oneDNN for its class: the target holds.
  r.rows = {row("layernorm", "fused", 95, 1.2, ""), row("rmsnorm", "fused", 60, NAN, ""),
            row("layernorm", "fused", 90, 0.8, "onednn"), row("layernorm", "fused", 90, 0.9, ""),
            row("layernorm", "onednn", 50, NAN, "")};
  r.rows[2].shape = {2, 16, 64};
  r.rows[3].shape = {3, 16, 64};
  const std::vector<std::string> v = norm_verdicts(r);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].rfind("2 of 4 fused rows meet their targets", 0), 0u) << v[0];
  EXPECT_NE(v[1].find("rmsnorm.fused fwd 1x16x64 thr 1: 60% of the copy loop (target >= 80%)"), std::string::npos)
      << v[1];
  EXPECT_NE(v[2].find("layernorm.fused fwd 3x16x64 thr 1: 0.90x oneDNN (target >= 1)"), std::string::npos) << v[2];
  r.rows = {row("layernorm", "onednn", 50, NAN, "")};
  EXPECT_TRUE(norm_verdicts(r).empty());
}

// A row faster than its own copy (the same bytes, buffers and stores) is a measurement error: flagged,
// printed as "error" instead of a percentage, named by the verdicts, held to no target; up to 105%
// (the noise of medians) it is a result.
TEST(BenchVerify, ARowAboveItsOwnCopyIsAMeasurementError) {
  auto row = [](const std::string& norm, const std::string& impl, double seconds) {
    NormRow x;
    x.norm = norm;
    x.impl = impl;
    x.pass = "bwd";
    x.shape = {1, 16, 64};
    x.time.median = seconds;
    x.time.samples = 3;
    x.bytes.data = 3 * 16 * 64 * 4;
    return x;
  };
  NormReport r;
  r.rows = {row("layernorm", "fused", 1.0e-6), row("rmsnorm", "fused", 1.0e-6)};
  NormRow ln_copy = row("copy", own_copy_impl(r.rows[0]), 1.2e-6), rms_copy = row("copy", own_copy_impl(r.rows[1]), 1.04e-6);
  r.rows.push_back(ln_copy);
  r.rows.push_back(rms_copy);
  derive(r);
  const NormRow& ln = r.rows[0];
  const NormRow& rms = r.rows[1];
  EXPECT_NEAR(ln.pct_of_own_copy, 120, 1e-9);
  EXPECT_TRUE(ln.measurement_error);
  EXPECT_EQ(ln.pct_against, "own-copy");
  EXPECT_NEAR(rms.pct_of_copy, 104, 1e-9);
  EXPECT_FALSE(rms.measurement_error);
  EXPECT_NEAR(rms.own_copy_gb_per_s, 3 * 16 * 64 * 4 / 1.04e-6 / 1e9, 1e-9);
  const std::vector<std::string> v = norm_verdicts(r);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].rfind("1 row(s) measured above 105% of their own copy", 0), 0u) << v[0];
  EXPECT_NE(v[1].find("measurement error: layernorm.fused/bwd/1x16x64/threads:1: 120% of its own copy"),
            std::string::npos)
      << v[1];
  EXPECT_EQ(v[2].rfind("1 of 1 fused rows meet their targets", 0), 0u) << v[2];
  const std::string text = render(r, OutputFormat::text);
  EXPECT_NE(text.find("error"), std::string::npos) << text;
  EXPECT_EQ(text.find(own_copy_impl(ln)), std::string::npos) << text;  // own copies: JSON and CSV only
  const NormReport back = norm_report_from_json(render(r, OutputFormat::json), "t");
  EXPECT_TRUE(back.rows[0].measurement_error);
  EXPECT_NEAR(back.rows[1].pct_of_own_copy, 104, 1e-9);
}

// The own copy stores the first input, or the XOR of two, into every output, at any length and
// alignment (64-byte aligned buffers take the streaming path), with ordinary or streaming stores, on
// one thread or several.
TEST(BenchCopies, OwnCopyStoresItsInputsBytesIntoEachOutput) {
  // A buffer of n bytes starting `offset` bytes past a 64-byte boundary, with its guard bytes.
  struct Buffer {
    std::vector<unsigned char> raw;
    unsigned char* at = nullptr;
    Buffer(int64_t n, int64_t offset) : raw(static_cast<size_t>(n + offset + 128), 0) {
      const uintptr_t base = reinterpret_cast<uintptr_t>(raw.data());
      at = raw.data() + ((64 - base % 64) % 64) + offset;
    }
  };
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (int64_t bytes : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{4097}, int64_t{300001}})
      for (int64_t offset : {0, 4, 7, 64})
        for (int n_in : {1, 2})
          for (int n_out : {1, 2})
            for (bool streaming : {false, true}) {
              Buffer a(bytes, offset), b(bytes, offset), o1(bytes, offset), o2(bytes, offset);
              for (int64_t i = 0; i < bytes; ++i) {
                a.at[i] = static_cast<unsigned char>(i * 7 + 3);
                b.at[i] = static_cast<unsigned char>(i * 13 + 1);
              }
              bench::detail::OwnCopyArrays arr;
              arr.ins[0] = a.at;
              arr.ins[1] = b.at;
              arr.outs[0] = o1.at;
              arr.outs[1] = o2.at;
              arr.n_in = n_in;
              arr.n_out = n_out;
              arr.bytes = bytes;
              arr.elements = bytes / 4;
              arr.streaming = streaming;
              bench::detail::own_copy(arr);
              for (int64_t i = 0; i < bytes + 32; ++i) {
                const unsigned char want = i >= bytes   ? 0
                                           : n_in == 2 ? static_cast<unsigned char>(a.at[i] ^ b.at[i])
                                                       : a.at[i];
                ASSERT_EQ(o1.at[i], want) << bytes << " bytes, at " << i;
                ASSERT_EQ(o2.at[i], n_out == 2 ? want : 0) << bytes << " bytes, at " << i;
              }
            }
  }
  omp_set_num_threads(1);
}

TEST(BenchVerify, ResidentRowsReuseOneBufferSetAndAreTimedInBatches) {
  NormBenchOptions o = quick_options();
  o.shapes = {{1, 16, 32}};
  o.resident_shapes = {{1, 16, 32}, {1, 32, 40}};  // a shape in both lists: two rows, never mixed
  o.impls = {"layernorm.fused", "rmsnorm.fused"};
  NormReport r = run_norm_bench(o);
  // copy.loop, copy.memcpy, 2 norms x (fwd, bwd, addfwd) and their own copies, per group.
  ASSERT_EQ(r.rows.size(), 3u * 14u);
  int resident = 0;
  for (const NormRow& x : r.rows) {
    EXPECT_EQ(x.status, "ok") << x.name() << ": " << x.verify.report;
    EXPECT_TRUE(x.verify.pass) << x.name();
    if (!x.resident) {
      EXPECT_EQ(x.calls_per_sample, 1) << x.name();
      EXPECT_EQ(x.name().find("resident"), std::string::npos);
      continue;
    }
    ++resident;
    EXPECT_NE(x.name().find("/resident/threads:1"), std::string::npos) << x.name();
    EXPECT_GE(x.calls_per_sample, 1) << x.name();
    EXPECT_GE(x.time.samples, 3) << x.name();
    EXPECT_EQ(x.working_set_bytes, x.bytes.data + x.bytes.stats) << x.name();  // one set, reused
    EXPECT_TRUE(x.cache_resident);
    // Held to the resident copy of its own shape.
    const NormRow* copy = find(r, fmt::format("copy.loop/copy/{}/resident/threads:1", x.shape.str()));
    ASSERT_NE(copy, nullptr);
    EXPECT_NEAR(x.copy_loop_gb_per_s, copy->gb_per_s, 1e-9 * copy->gb_per_s) << x.name();
  }
  EXPECT_EQ(resident, 2 * 14);
  // The resident rows are cache-resident by design: the warning counts only the 8 memory-bound
  // rows whose 1 MiB rotation fits in the caches.
  bool warned = false;
  for (const std::string& w : r.warnings) warned = warned || w.rfind("8 row(s) rotate through less than", 0) == 0;
  EXPECT_TRUE(warned);
  // The text shows the resident rows in their own section, its %copy explained.
  const std::string text = render(r, OutputFormat::text);
  const size_t memory_at = text.find("memory-bound shapes"), resident_at = text.find("cache-resident, the training");
  ASSERT_NE(memory_at, std::string::npos) << text;
  ASSERT_NE(resident_at, std::string::npos) << text;
  EXPECT_LT(memory_at, resident_at);
  EXPECT_LT(text.find("1x32x40"), text.find("median/min/max"));
  EXPECT_GT(text.find("1x32x40"), resident_at);
  EXPECT_NE(text.find("same reused buffers"), std::string::npos);
  EXPECT_NE(render_norm_summary(r, OutputFormat::markdown).find("cache-resident"), std::string::npos);
  // A report without resident rows reads as before: no section headings.
  NormReport memory_only = r;
  memory_only.rows.erase(std::remove_if(memory_only.rows.begin(), memory_only.rows.end(),
                                        [](const NormRow& x) { return x.resident; }),
                         memory_only.rows.end());
  EXPECT_EQ(render(memory_only, OutputFormat::text).find("memory-bound shapes"), std::string::npos);
}

TEST(BenchVerify, EveryTimedRowWasCheckedFirst) {
  // Every kernel call and every progress line in one sequence: a call is named as its row is
  // (implementation, pass, shape, thread count), so each row's calls can be placed against the
  // line that says it was verified.
  auto events = std::make_shared<std::vector<std::string>>();
  const NormShape shape{2, 4, 48};
  const NormRegistry builtin = builtin_norm_impls();
  NormRegistry reg;
  for (NormImpl m : builtin.all()) {
    for (NormFn* fn : {&m.forward, &m.backward, &m.add_forward}) {
      if (!*fn) continue;
      const char* pass = fn == &m.forward ? "fwd" : fn == &m.backward ? "bwd" : "addfwd";
      *fn = [events, inner = *fn, key = fmt::format("{}/{}/{}", m.name(), pass, shape.str())](
                opcases::Tensors& t, const opcases::OpCase& c) {
        events->push_back(fmt::format("call {}/threads:{}", key, num_threads()));
        inner(t, c);
      };
    }
    reg.add(m);
  }
  NormBenchOptions o = quick_options();
  o.shapes = {shape};
  o.threads = parse_threads("1,all");
  o.log = [events](const std::string& line) { events->push_back(line); };
  NormReport r = run_norm_bench(o, reg);
  // copy.loop, copy.memcpy, 9 implementations x 2 passes, 4 add+norm rows, and each of those 22
  // rows' own copy, per thread count.
  EXPECT_EQ(r.rows.size(), o.threads.size() * 46);
  int ordered = 0;
  for (const NormRow& x : r.rows) {
    EXPECT_EQ(x.status, "ok") << x.name() << ": " << x.verify.report;
    EXPECT_TRUE(x.verify.pass) << x.name();
    EXPECT_GE(x.time.samples, 3) << x.name();
    EXPECT_TRUE(x.cache_resident) << x.name();  // a 1 MiB rotation is labelled as such
    if (x.norm == "copy") continue;  // checked by a memcmp of its one call, no kernel of the registry
    const auto is = [&](const std::string& e, const std::string& prefix) { return e.rfind(prefix, 0) == 0; };
    const auto verified = std::find_if(events->begin(), events->end(),
                                       [&](const std::string& e) { return is(e, "verified " + x.name() + " "); });
    ASSERT_NE(verified, events->end()) << x.name() << " was never verified";
    const auto timed = std::find_if(events->begin(), events->end(),
                                    [&](const std::string& e) { return is(e, x.name() + ": median "); });
    ASSERT_NE(timed, events->end()) << x.name() << " has no median line";
    EXPECT_LT(verified, timed) << x.name() << ": timed before it was verified";
    ++ordered;
    // The backend's rows call the Backend (their op cases, check_case's calls): nothing to count here.
    if (reg.select({x.norm + "." + x.impl})[0]->backend) continue;
    const auto count_calls = [&](auto from, auto to) {
      return std::count(from, to, "call " + x.name());
    };
    // The check's one call before the line that says it passed; the warm-up and every timed call after.
    EXPECT_EQ(count_calls(events->begin(), verified), 1) << x.name() << ": calls before it was verified";
    EXPECT_GE(count_calls(verified, timed), o.warmup + x.time.samples) << x.name() << ": calls between its check and its time";
  }
  EXPECT_EQ(ordered, static_cast<int>(o.threads.size()) * 22);
  bool warned = false;
  for (const std::string& w : r.warnings) warned = warned || w.find("cache speed") != std::string::npos;
  EXPECT_TRUE(warned);
}

// ---- JSON, merge, compare ---------------------------------------------------------------------------

TEST(BenchJson, RoundTripMergeAndCompare) {
  NormBenchOptions o = quick_options();
  o.shapes = {{1, 4, 32}};
  o.impls = {"fused"};
  NormReport r = run_norm_bench(o);
  const std::string text = render(r, OutputFormat::json);
  auto j = nlohmann::json::parse(text);
  ASSERT_TRUE(j.contains("context"));
  EXPECT_EQ(j["context"]["normlab_bench"], "norms");
  EXPECT_TRUE(j["context"]["library_versions"].contains("oneDNN"));
  EXPECT_TRUE(j["context"]["caches"].is_array());
  EXPECT_EQ(j["context"]["normlab_source_hash"], build_info().source_hash);
  ASSERT_EQ(j["benchmarks"].size(), r.rows.size());
  const auto& b0 = j["benchmarks"][0];
  for (const char* key : {"name", "run_name", "run_type", "iterations", "real_time", "cpu_time", "time_unit",
                          "aggregates", "counters", "verify", "threads"})
    EXPECT_TRUE(b0.contains(key)) << key;
  EXPECT_EQ(bench_kind_of_json(text, "t"), "norms");

  NormReport back = norm_report_from_json(text, "t");
  EXPECT_EQ(back.context.source_hash, r.context.source_hash);
  // "AMD EPYC" names four generations: the family / model numbers and ISA say which one ran.
  EXPECT_EQ(j["context"]["cpu_model_number"], cpu_info().model);
  EXPECT_EQ(back.context.cpu_family, cpu_info().family);
  EXPECT_EQ(back.context.cpu_isa, r.context.cpu_isa);
  if (!cpu_info().isa.empty()) {
    EXPECT_NE(r.context.cpu_isa.find(cpu_info().isa.front()), std::string::npos);
  }
  ASSERT_EQ(back.rows.size(), r.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    EXPECT_EQ(back.rows[i].name(), r.rows[i].name());
    EXPECT_NEAR(back.rows[i].time.median, r.rows[i].time.median, 1e-12);
    EXPECT_EQ(back.rows[i].bytes.data, r.rows[i].bytes.data);
    EXPECT_EQ(back.rows[i].verify.pass, r.rows[i].verify.pass);
  }

  // Three runs: the middle one's times are the median; the range covers all three.
  NormReport slow = back, fast = back;
  for (NormRow& x : slow.rows) x.time = summarize({x.time.median * 1.2});
  for (NormRow& x : fast.rows) x.time = summarize({x.time.median * 0.9});
  NormReport m = merge_runs({slow, back, fast});
  ASSERT_EQ(m.rows.size(), r.rows.size());
  const NormRow* lf = find(m, "layernorm.fused/fwd/1x4x32/threads:1");
  ASSERT_NE(lf, nullptr);
  EXPECT_EQ(lf->runs, 3);
  EXPECT_NEAR(lf->time.median, find(back, lf->name())->time.median, 1e-12);
  ASSERT_TRUE(lf->run_range.count("median"));
  EXPECT_NEAR(lf->run_range.at("median").second, 1.2 * lf->time.median, 1e-12);
  EXPECT_TRUE(lf->run_range.count("gb_per_s"));
  const std::string merged = render(m, OutputFormat::markdown);
  EXPECT_NE(merged.find("| runs |"), std::string::npos) << merged;

  // Compare: the slow run against the base (both without spread): every row 1.2x, "slower".
  NormReport exact = back;
  for (NormRow& x : exact.rows) x.time = summarize({x.time.median});
  std::vector<CompareRow> c = compare(timed_entries(exact), timed_entries(slow));
  ASSERT_EQ(c.size(), timed_entries(back).size());
  for (const CompareRow& x : c) {
    EXPECT_NEAR(x.ratio, 1.2, 1e-9) << x.name;
    EXPECT_EQ(x.verdict, "slower");
  }
  EXPECT_EQ(compare(timed_entries(back), timed_entries(back))[0].verdict, "same");
  EXPECT_EQ(compare(timed_entries(exact), timed_entries(fast))[0].verdict, "faster");
  EXPECT_THROW(norm_report_from_json("{}", "x"), UsageError);
  EXPECT_THROW(norm_report_from_json("not json", "x"), UsageError);
  EXPECT_FALSE(render(r, OutputFormat::csv).empty());
  EXPECT_NE(render(r, OutputFormat::text).find("layernorm.fused"), std::string::npos);
}

TEST(BenchJson, ResidentAndAddNormRowsRoundTrip) {
  const NormShape s{1, 8, 16};
  NormReport r;
  for (const bool resident : {false, true}) {
    NormRow copy = row("copy", "loop", "copy", 1e-6, s), fused = row("rmsnorm", "fused", "addfwd", 4e-6, s),
            unfused = row("rmsnorm", "unfused", "addfwd", 5e-6, s);
    for (NormRow* x : {&copy, &fused, &unfused}) {
      x->resident = resident;
      x->calls_per_sample = resident ? 37 : 1;
      x->time = summarize({x->time.median, x->time.median});  // two samples
    }
    r.rows.insert(r.rows.end(), {copy, fused, unfused});
  }
  derive(r);
  const std::string text = render(r, OutputFormat::json);
  const auto j = nlohmann::json::parse(text);
  const auto& b = j["benchmarks"][4];  // the resident fused row
  EXPECT_EQ(b["name"], "rmsnorm.fused/addfwd/1x8x16/resident/threads:1");
  EXPECT_EQ(b["resident"], true);
  EXPECT_EQ(b["calls_per_sample"], 37);
  EXPECT_EQ(b["iterations"], 2 * 37);  // Google Benchmark's iterations: every call timed
  EXPECT_NEAR(b["counters"]["vs_unfused"].get<double>(), 1.25, 1e-12);
  NormReport back = norm_report_from_json(text, "t");
  ASSERT_EQ(back.rows.size(), r.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    EXPECT_EQ(back.rows[i].name(), r.rows[i].name());
    EXPECT_EQ(back.rows[i].resident, r.rows[i].resident);
    EXPECT_EQ(back.rows[i].calls_per_sample, r.rows[i].calls_per_sample);
  }
  EXPECT_NEAR(find(back, "rmsnorm.fused/addfwd/1x8x16/threads:1")->vs_unfused, 1.25, 1e-12);

  const std::string csv = render(r, OutputFormat::csv);
  EXPECT_NE(csv.find(",resident,calls_per_sample,vs_unfused,device,dtype,own_copy_gb_per_s,pct_of_own_copy,"
                     "measurement_error\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find(",1,37,1.25,cpu,f32,"), std::string::npos) << csv;  // the resident fused row
  const std::string md = render(r, OutputFormat::markdown);
  EXPECT_NE(md.find("| vs unfused |"), std::string::npos) << md;
  EXPECT_NE(md.find("cache-resident, the training step's shapes"), std::string::npos) << md;

  // Merged and compared by name: the two kinds of the same shape stay apart.
  NormReport slow = back;
  for (NormRow& x : slow.rows)
    if (x.impl == "fused") x.time = summarize({x.time.median * 1.1});
  NormReport m = merge_runs({back, slow});
  ASSERT_EQ(m.rows.size(), r.rows.size());
  const NormRow* mf = find(m, "rmsnorm.fused/addfwd/1x8x16/resident/threads:1");
  ASSERT_TRUE(mf->run_range.count("vs_unfused"));
  EXPECT_NEAR(mf->run_range.at("vs_unfused").first, 5.0 / 4.4, 1e-9);
  const std::vector<CompareRow> c = compare(timed_entries(back), timed_entries(slow));
  ASSERT_EQ(c.size(), r.rows.size());
  for (const CompareRow& x : c) EXPECT_NEAR(x.ratio, x.name.find(".fused/") != std::string::npos ? 1.1 : 1.0, 1e-9) << x.name;
}

// A merge holds each run's ratios, measured side by side in that run, and takes their median: in
// these three runs the median of the ratios (2x) is not the ratio of the median times (3/2 = 1.5x).
TEST(BenchJson, MergeTakesTheMedianOfEachRunsRatios) {
  const NormShape s{4, 8, 16};
  std::vector<NormReport> runs;
  const double fused[] = {1e-6, 2e-6, 4e-6}, onednn[] = {2e-6, 5e-6, 3e-6}, loop[] = {1e-6, 1e-6, 2e-6};
  for (int i = 0; i < 3; ++i) {
    NormReport r;
    r.context.date = "2026-01-0" + std::to_string(i + 1) + "T00:00:00+00:00";
    r.context.git_commit = "c" + std::to_string(i);
    r.context.others_cpu = 0.01 * (i + 1);
    r.context.thread_round_trip_ns = {60.0 + i, 70.0 + i};
    r.context.tune_mode = "cached";
    r.context.kernel_choices = {{"layernorm_forward d=16 mem t=1", i ? "tiled-16" : "pipelined-pf0", "", "measured", 512, {}}};
    r.rows = {row("copy", "loop", "copy", loop[i], s), row("layernorm", "fused", "fwd", fused[i], s),
              row("layernorm", "onednn", "fwd", onednn[i], s)};
    derive(r);
    runs.push_back(r);
  }
  NormReport m = merge_runs(runs);
  const NormRow* lf = find(m, "layernorm.fused/fwd/4x8x16/threads:1");
  ASSERT_NE(lf, nullptr);
  EXPECT_NEAR(lf->time.median, 2e-6, 1e-15);
  EXPECT_NEAR(lf->vs_onednn, 2.0, 1e-12);  // runs: 2, 2.5, 0.75
  EXPECT_NEAR(lf->run_range.at("vs_onednn").first, 0.75, 1e-12);
  EXPECT_NEAR(lf->run_range.at("vs_onednn").second, 2.5, 1e-12);
  EXPECT_NEAR(lf->backend_vs_onednn, 2.0, 1e-12);
  EXPECT_NEAR(lf->pct_of_copy, 50.0, 1e-9);  // runs: 100%, 50%, 50% (the ratio of medians: 1/2 too)
  EXPECT_NEAR(lf->run_range.at("pct_of_copy").second, 100.0, 1e-9);
  // The copy's GB/s beside each kernel row, with its range.
  EXPECT_NEAR(lf->copy_loop_gb_per_s, 4.096, 1e-9);
  EXPECT_NEAR(lf->run_range.at("copy_loop_gb_per_s").first, 2.048, 1e-9);
  const std::string name = lf->name();
  derive(m);  // a merged row keeps its figures
  lf = find(m, name);
  EXPECT_NEAR(lf->vs_onednn, 2.0, 1e-12);

  // The document carries every run's context, and reads back with the merged figures.
  const std::string text = render(m, OutputFormat::json);
  const auto j = nlohmann::json::parse(text);
  ASSERT_TRUE(j.contains("runs"));
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["runs"][1]["date"], "2026-01-02T00:00:00+00:00");
  EXPECT_EQ(j["runs"][2]["normlab_commit"], "c2");
  EXPECT_NEAR(j["runs"][2]["others_cpu"].get<double>(), 0.03, 1e-12);
  EXPECT_EQ(j["runs"][1]["thread_round_trip_ns"][1], 71.0);
  EXPECT_EQ(j["runs"][1]["kernel_choices"][0]["fused"], "tiled-16");
  NormReport back = norm_report_from_json(text, "t");
  ASSERT_EQ(back.run_contexts.size(), 3u);
  EXPECT_EQ(back.run_contexts[0].kernel_choices[0].fused, "pipelined-pf0");
  EXPECT_NEAR(find(back, name)->vs_onednn, 2.0, 1e-12);
  EXPECT_NEAR(find(back, name)->pct_of_copy, 50.0, 1e-9);

  // Steps the same way: RMSNorm's step speed-up is each run's LN / RMS, then the median.
  std::vector<StepReport> steps;
  const double ln_ms[] = {10, 12, 14}, rms_ms[] = {9, 13, 11};
  for (int i = 0; i < 3; ++i) {
    StepReport r;
    r.context.fma_peaks = {{1, 100.0 + 10 * i, "avx2+fma", 8}};
    StepRow ln, rms;
    ln.model = rms.model = "toy";
    ln.norm = "layernorm";
    rms.norm = "rmsnorm";
    ln.batch = rms.batch = ln.seq = rms.seq = 1;
    ln.step = summarize({ln_ms[i] * 1e-3});
    rms.step = summarize({rms_ms[i] * 1e-3});
    ln.norm_kernels = rms.norm_kernels = summarize({1e-3});
    r.rows = {ln, rms};
    derive(r);
    steps.push_back(r);
  }
  StepReport sm = merge_runs(steps);
  EXPECT_NEAR(sm.rows[1].step_speedup, 10.0 / 9.0, 1e-12);  // runs 1.11, 0.92, 1.27; medians 12/11
  EXPECT_NEAR(sm.rows[1].run_range.at("step_speedup").first, 12.0 / 13.0, 1e-12);
  EXPECT_NEAR(sm.context.fma_peak(1)->gflop_per_s, 110.0, 1e-9);
  EXPECT_NEAR(sm.context.fma_peak(1)->run_range.second, 120.0, 1e-9);
  const StepReport sback = step_report_from_json(render(sm, OutputFormat::json), "t");
  ASSERT_EQ(sback.run_contexts.size(), 3u);
  EXPECT_NEAR(sback.run_contexts[2].fma_peaks[0].gflop_per_s, 120.0, 1e-9);
  EXPECT_NEAR(sback.context.fma_peaks[0].run_range.first, 100.0, 1e-9);
  EXPECT_NEAR(sback.rows[1].step_speedup, 10.0 / 9.0, 1e-12);
}

// ---- rows of a CUDA device (bench norms --device cuda | cuda-sim) ----------------------------------

TEST(BenchDevice, NamesBytesAndDerivedFigures) {
  const NormShape s{4, 8, 16};  // 512 elements
  auto on = [&](NormRow r, const std::string& dtype) {
    r.device = "cuda";
    r.dtype = dtype;
    r.bytes = norm_bytes(r.norm, r.pass, s, dtype == "bf16" ? 2 : 4);
    return r;
  };
  EXPECT_EQ(on(row("layernorm", "fused", "fwd", 1e-6, s), "f32").name(), "layernorm.fused/fwd/4x8x16/cuda");
  EXPECT_EQ(on(row("rmsnorm", "fused", "bwd", 1e-6, s), "bf16").name(), "rmsnorm.fused/bwd/4x8x16/bf16/cuda");
  // bf16: the N x D arrays and gamma/beta at 2 bytes, dgamma/dbeta and the statistics at 4.
  const ByteCount b = norm_bytes("layernorm", "bwd", s, 2);
  EXPECT_EQ(b.data, 3 * 512 * 2);
  EXPECT_EQ(b.params, 16 * 2 + 2 * 16 * 4);
  EXPECT_EQ(b.stats, 2 * 32 * 4);
  EXPECT_EQ(norm_bytes("rmsnorm", "fwd", s, 2).params, 16 * 2);

  NormReport r;
  r.rows.push_back(on(row("copy", "loop", "copy", 1e-6, s), "f32"));          // 4.096 GB/s on the device
  r.rows.push_back(row("copy", "loop", "copy", 4e-6, s));                     // the cpu's: 1.024 GB/s
  r.rows.push_back(on(row("layernorm", "fused", "fwd", 2e-6, s), "f32"));     // 2.048 GB/s
  r.rows.push_back(on(row("rmsnorm", "fused", "fwd", 1e-6, s), "f32"));
  r.rows.push_back(on(row("layernorm", "fused", "fwd", 1e-6, s), "bf16"));    // 2048 B / 1 us
  r.rows.push_back(on(row("rmsnorm", "fused", "fwd", 0.8e-6, s), "bf16"));
  r.rows.push_back(on(row("rmsnorm", "torch", "fwd", 1.6e-6, s), "bf16"));
  r.rows.push_back(row("layernorm", "fused", "fwd", 8e-6, s));                // a cpu row: never compared
  derive(r);
  const NormRow* ln = find(r, "layernorm.fused/fwd/4x8x16/cuda");
  ASSERT_NE(ln, nullptr);
  EXPECT_NEAR(ln->copy_loop_gb_per_s, 4.096, 1e-9);  // the device's copy, not the cpu's
  EXPECT_NEAR(ln->pct_of_copy_loop, 50.0, 1e-9);
  EXPECT_NEAR(find(r, "rmsnorm.fused/fwd/4x8x16/cuda")->rms_over_ln, 2.0, 1e-12);
  const NormRow* lb = find(r, "layernorm.fused/fwd/4x8x16/bf16/cuda");
  EXPECT_NEAR(lb->gb_per_s, 2.048, 1e-9);
  EXPECT_NEAR(lb->pct_of_copy_loop, 50.0, 1e-9);  // held to the copy whatever its dtype
  const NormRow* rb = find(r, "rmsnorm.fused/fwd/4x8x16/bf16/cuda");
  EXPECT_NEAR(rb->rms_over_ln, 1.25, 1e-12);      // against LayerNorm of the same dtype
  EXPECT_NEAR(rb->vs_torch, 2.0, 1e-12);
  // 0.512 GB/s against the cpu's copy (1.024), not the device's (4.096: 12.5%).
  EXPECT_NEAR(find(r, "layernorm.fused/fwd/4x8x16/threads:1")->pct_of_copy_loop, 50.0, 1e-9);

  // The JSON keeps the device, the dtype and the context's device; a document without them is
  // the cpu's, float32.
  r.context.device = "cuda: built (runtime 13.0), 1 device(s): NVIDIA H200 (sm_90)";
  const std::string text = render(r, OutputFormat::json);
  const NormReport back = norm_report_from_json(text, "t");
  EXPECT_EQ(back.context.device, r.context.device);
  ASSERT_EQ(back.rows.size(), r.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    EXPECT_EQ(back.rows[i].name(), r.rows[i].name());
    EXPECT_EQ(back.rows[i].device, r.rows[i].device);
    EXPECT_EQ(back.rows[i].dtype, r.rows[i].dtype);
  }
  auto j = nlohmann::json::parse(text);
  for (auto& b2 : j["benchmarks"]) {
    b2.erase("device");
    b2.erase("dtype");
  }
  const NormReport old = norm_report_from_json(j.dump(), "old");
  EXPECT_EQ(old.rows[2].device, "cpu");
  EXPECT_EQ(old.rows[2].dtype, "f32");
  const std::string table = render(r, OutputFormat::text);
  EXPECT_EQ(table.rfind("device: cuda: built", 0), 0u) << table;
  EXPECT_NE(table.find(" bf16 "), std::string::npos) << table;
}

namespace {

// LayerNorm's forward computed in float32 from whatever its case's tensors are stored in, y times
// `scale` rounded to `rounded`, then stored as the case's y is.
opcases::CaseCall rounding_layernorm(const opcases::OpCase& c, Precision rounded, float scale = 1.0f) {
  return [&c, rounded, scale](Backend&, opcases::Tensors& t) {
    const Tensor x = t.at("x").to(DType::f32), g = t.at("gamma").to(DType::f32), b = t.at("beta").to(DType::f32);
    const int64_t n = x.shape()[0], d = x.shape()[1];
    Tensor y = Tensor::empty({n, d});
    cpu::layernorm_forward_multipass(y.data<float>(), out(t, "mean"), out(t, "rstd"), x.data<float>(),
                                     g.data<float>(), b.data<float>(), n, d, static_cast<float>(c.number("eps")));
    for (int64_t i = 0; i < n * d; ++i) y.data<float>()[i] *= scale;
    round_to(rounded, y.data<float>(), n * d);
    t.at("y").copy_(y.to(t.at("y").dtype()));
  };
}

}  // namespace

// check_case at a 16-bit storage holds a stored output to that format's rounding: a kernel that
// stores y as bf16 passes at bf16, fails float32's tolerance, and fails at bf16 when 1% off.
TEST(BenchVerify, Bf16OutputsAreHeldToBf16Rounding) {
  const opcases::OpCase& c = opcases::find_case("layernorm_fwd rows=6 d=40 seed=5");
  Backend& cpu_backend = backend("cpu");
  const opcases::CaseCheck ok = opcases::check_case(c, cpu_backend, Precision::bf16, rounding_layernorm(c, Precision::bf16));
  EXPECT_TRUE(ok.pass) << ok.report;
  EXPECT_FALSE(opcases::check_case(c, cpu_backend, Precision::fp32, rounding_layernorm(c, Precision::bf16)).pass)
      << "bf16 rounding passed float32's tolerance";
  const opcases::CaseCheck off =
      opcases::check_case(c, cpu_backend, Precision::bf16, rounding_layernorm(c, Precision::bf16, 1.01f));
  EXPECT_FALSE(off.pass);
  EXPECT_NE(off.report.find("\n  y: "), std::string::npos) << off.report;
}

// The cpu's 16-bit storage rows: every fused norm and pass in both formats, checked before they
// are timed, at odd sizes (the kernels' scalar rows) and multiples of 8 (their vector rows), with
// half the bytes of the float32 row of the same case; fp16 held to its own (tighter) rounding.
TEST(BenchVerify, SixteenBitRowsAreCheckedAndCountHalfTheBytes) {
  NormBenchOptions o = quick_options();
  o.impls = {"fused"};
  o.fwd = o.bwd = true;
  o.addfwd = false;
  o.dtypes = {"f32", "bf16", "fp16"};
  const NormReport r = run_norm_bench(o, builtin_norm_impls());
  std::map<std::string, const NormRow*> f32;
  for (const NormRow& x : r.rows)
    if (x.dtype == "f32") f32[fmt::format("{}/{}/{}", x.norm, x.pass, x.shape.str())] = &x;
  int sixteen = 0;
  for (const NormRow& x : r.rows) {
    EXPECT_EQ(x.status, "ok") << x.name() << ": " << x.verify.report;
    if (x.dtype == "f32" || is_own_copy(x)) continue;
    ++sixteen;
    EXPECT_TRUE(x.dtype == "bf16" || x.dtype == "fp16") << x.name();
    EXPECT_GE(x.time.samples, 3) << x.name();
    const NormRow* same = f32[fmt::format("{}/{}/{}", x.norm, x.pass, x.shape.str())];
    ASSERT_NE(same, nullptr) << x.name();
    // x, y (dy, x, dx) stored in 2 bytes; statistics stay float32
    EXPECT_EQ(2 * x.bytes.data, same->bytes.data) << x.name();
    EXPECT_EQ(x.bytes.stats, same->bytes.stats) << x.name();
    if (x.norm == "rmsnorm") {
      EXPECT_TRUE(std::isfinite(x.rms_over_ln)) << x.name();  // within its format
    }
  }
  EXPECT_EQ(sixteen, 2 /*formats*/ * 2 /*norms*/ * 2 /*passes*/ * 2 /*shapes*/);

  // A kernel that stores as fp16 is held to fp16's half ulp (2^-11), not bf16's.
  const opcases::OpCase& c = opcases::find_case("layernorm_fwd rows=3 d=40 seed=5");
  EXPECT_TRUE(opcases::check_case(c, backend("cpu"), Precision::fp16, rounding_layernorm(c, Precision::fp16)).pass);
  EXPECT_FALSE(opcases::check_case(c, backend("cpu"), Precision::fp16, rounding_layernorm(c, Precision::bf16)).pass)
      << "bf16 rounding passed as fp16";
}

// ---- whole steps ---------------------------------------------------------------------------------

TEST(BenchStep, MatmulFlopsByHand) {
  // toy, L 2, d 16, h 32, vocab 16, batch 2 x seq 4: M = 8 tokens. Each product 2*M*in*out, times
  // 3 (forward, dX, dW). Per block: mix 16x16, fc1 16x32, fc2 32x16 -> 3*2*8*(256 + 512 + 512)
  // = 61440; two blocks 122880; head 16x16 -> 3*2*8*256 = 12288. Total 135168.
  EXPECT_EQ(step_matmul_flops("toy", 2, 16, 32, 16, 2, 4), 135168.0);
  // gpt adds q, k, v (the mixer's d x d is o): 3*2*8*(4*256 + 1024) = 98304 per block, and
  // attention's Q K^T and P V, each 2 * (batch*heads) * T * T * Dh = 2*2*4*4*16 = 1024 forward,
  // times 3: 6144 per block. 2 * (98304 + 6144) + 12288 = 221184.
  EXPECT_EQ(step_matmul_flops("gpt", 2, 16, 32, 16, 2, 4), 221184.0);
  // The default toy step: 1.27 GFLOP (results/train-speed.md: 183 products of 61 linears).
  EXPECT_NEAR(step_matmul_flops("toy", 20, 64, 128, 64, 32, 16), 1.2708e9, 1e5);
  EXPECT_THROW(step_matmul_flops("bert", 2, 16, 32, 16, 2, 4), UsageError);

  // The count matches the models as built: every linear weight (w, out x in) is three products
  // of 2*M*in*out; the gpt model adds only attention's products.
  for (const char* kind : {"toy", "gpt"}) {
    ModelConfig cfg;
    cfg.model = parse_kind<ModelKind>(kind);
    cfg.layers = 3;
    cfg.d_model = 24;
    cfg.d_hidden = 40;
    cfg.heads = 2;
    cfg.vocab = 12;
    cfg.seq_len = 5;
    Model model(cfg, 0);
    double weights = 0;
    for (const Tensor& p : model.params().all()) {
      const std::string& n = p.name();
      if (n.size() > 2 && n.compare(n.size() - 2, 2, ".w") == 0) weights += static_cast<double>(p.numel());
    }
    const int64_t batch = 3, m = batch * cfg.seq_len;
    const double attention = cfg.model == ModelKind::gpt ? 3.0 * cfg.layers * 2 * 2 * batch * 5 * 5 * 24 : 0.0;
    EXPECT_EQ(step_matmul_flops(kind, 3, 24, 40, 12, batch, 5), 6.0 * m * weights + attention) << kind;
  }
}

TEST(BenchStep, FmaPeakAndTheStepsShareOfIt) {
  const FmaPeak p = measure_fma_peak(1, 0.005);
  EXPECT_EQ(p.threads, 1);
  EXPECT_GT(p.gflop_per_s, 0);
  EXPECT_TRUE(std::isfinite(p.gflop_per_s));
  EXPECT_TRUE(p.isa == "avx512f" || p.isa == "avx2+fma" || p.isa == "scalar") << p.isa;
  EXPECT_EQ(p.lanes, p.isa == "avx512f" ? 16 : p.isa == "avx2+fma" ? 8 : 1);

  // GFLOP/s and the share of the peak at the row's own thread count.
  StepReport r;
  r.context.fma_peaks = {{1, 100.0, "avx2+fma", 8}, {2, 160.0, "avx2+fma", 8}};
  StepRow one, two, unmeasured;
  one.model = two.model = unmeasured.model = "toy";
  one.norm = two.norm = unmeasured.norm = "layernorm";
  one.batch = two.batch = unmeasured.batch = 1;
  one.seq = two.seq = unmeasured.seq = 1;
  one.threads = 1;
  two.threads = 2;
  unmeasured.threads = 4;
  one.matmul_flops = two.matmul_flops = unmeasured.matmul_flops = 2e9;
  one.step = summarize({40e-3});  // 50 GFLOP/s
  two.step = summarize({20e-3});  // 100 GFLOP/s
  unmeasured.step = summarize({10e-3});
  r.rows = {one, two, unmeasured};
  derive(r);
  EXPECT_NEAR(r.rows[0].gflop_per_s, 50.0, 1e-9);
  EXPECT_NEAR(r.rows[0].pct_of_fma_peak, 50.0, 1e-9);
  EXPECT_NEAR(r.rows[1].fma_peak_gflop_per_s, 160.0, 1e-12);
  EXPECT_NEAR(r.rows[1].pct_of_fma_peak, 62.5, 1e-9);
  EXPECT_NEAR(r.rows[2].gflop_per_s, 200.0, 1e-9);
  EXPECT_TRUE(std::isnan(r.rows[2].pct_of_fma_peak));  // no peak at 4 threads: no share

  // The peak travels in the JSON context, and a merge takes its median over the runs.
  const std::string text = render(r, OutputFormat::json);
  const auto j = nlohmann::json::parse(text);
  ASSERT_EQ(j["context"]["fma_peak"].size(), 2u);
  EXPECT_EQ(j["context"]["fma_peak"][1]["threads"], 2);
  EXPECT_EQ(j["benchmarks"][0]["counters"]["matmul_flops"], 2e9);
  StepReport back = step_report_from_json(text, "t");
  ASSERT_EQ(back.context.fma_peaks.size(), 2u);
  EXPECT_EQ(back.context.fma_peaks[1].isa, "avx2+fma");
  EXPECT_NEAR(back.rows[1].pct_of_fma_peak, 62.5, 1e-9);
  StepReport faster = back;
  for (FmaPeak& q : faster.context.fma_peaks) q.gflop_per_s *= 2;
  StepReport third = faster;
  StepReport m = merge_runs({back, faster, third});
  EXPECT_NEAR(m.context.fma_peak(1)->gflop_per_s, 200.0, 1e-9);
  EXPECT_NEAR(m.rows[0].pct_of_fma_peak, 25.0, 1e-9);
  const std::string table = render(m, OutputFormat::text);
  EXPECT_NE(table.find("FMA peak (float32, avx2+fma, 8 floats per vector"), std::string::npos) << table;
  EXPECT_NE(table.find("1 thread 200.0 GFLOP/s, 2 threads 320.0 GFLOP/s"), std::string::npos) << table;
  EXPECT_NE(table.find("%FMA peak"), std::string::npos);
  EXPECT_NE(render(m, OutputFormat::csv).find(",matmul_flops,gflop_per_s,fma_peak_gflop_per_s,pct_of_fma_peak,clocked_step_s,products_s,"),
            std::string::npos);
}

// The two threads' cache-line round trip: measured (finite, positive) where two threads run, NaN
// where one does; it travels in the JSON context, merges as every run's values in order, is
// printed, and a far one (cores on different complexes) is warned about.
TEST(BenchContext, ThreadRoundTrip) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  EXPECT_TRUE(std::isnan(measure_thread_round_trip_ns()));
  omp_set_num_threads(2);
  if (omp_get_num_procs() >= 2) {
    const double ns = measure_thread_round_trip_ns();
    EXPECT_TRUE(std::isfinite(ns)) << ns;
    EXPECT_GT(ns, 0);
  }
  omp_set_num_threads(saved);

  StepReport r;
  r.context.thread_round_trip_ns = {61, 63};
  StepReport back = step_report_from_json(render(r, OutputFormat::json), "t");
  EXPECT_EQ(back.context.thread_round_trip_ns, (std::vector<double>{61, 63}));
  EXPECT_NE(render(r, OutputFormat::text).find("cache line in 61 / 63 ns"), std::string::npos) << render(r, OutputFormat::text);
  auto far_warning = [](const std::vector<std::string>& w) {
    return std::any_of(w.begin(), w.end(), [](const std::string& s) { return s.find("far apart") != std::string::npos; });
  };
  EXPECT_FALSE(far_warning(context_warnings(back.context)));
  StepReport far = back;
  far.context.thread_round_trip_ns = {350, 64};
  EXPECT_TRUE(far_warning(context_warnings(far.context)));
  StepReport m = merge_runs({back, far});
  EXPECT_EQ(m.context.thread_round_trip_ns, (std::vector<double>{61, 63, 350, 64}));
}

// Two blocks of d 16 over 2 x 4 tokens, at 1 thread, two timed steps: seconds to run.
StepOptions tiny_step_options() {
  StepOptions o;
  o.threads = {1};
  o.layers = 2;
  o.d_model = 16;
  o.d_hidden = 32;
  o.heads = 2;
  o.vocab = 16;
  o.batch = 2;
  o.seq = 4;
  o.warmup = 1;
  o.repeats = 2;
  o.min_time = 0;
  o.peak_time = 0.005;
  return o;
}

TEST(BenchStep, TinyModelsBothNorms) {
  StepOptions o = tiny_step_options();
  StepReport r = run_step_bench(o);
  ASSERT_EQ(r.context.fma_peaks.size(), 1u);
  EXPECT_GT(r.context.fma_peak(1)->gflop_per_s, 0);
  ASSERT_EQ(r.rows.size(), 4u);  // toy and gpt, layernorm and rmsnorm
  for (const StepRow& x : r.rows) {
    EXPECT_EQ(x.norm_calls, 2 * 2 + 1) << x.name();  // pre-LN: two per block, and the final norm
    EXPECT_EQ(x.norm_rows, 8);
    EXPECT_EQ(x.norm_parameters, (x.norm == "layernorm" ? 2 : 1) * 16 * 5) << x.name();
    EXPECT_GE(x.step.samples, 2);
    EXPECT_GE(x.norm_kernels.samples, 2);
    EXPECT_TRUE(x.norm_verify.pass);
    EXPECT_NEAR(x.norm_share, x.norm_kernels.median / x.step.median, 1e-12);
    EXPECT_EQ(x.matmul_flops, step_matmul_flops(x.model, 2, 16, 32, 16, 2, 4)) << x.name();
    EXPECT_GT(x.pct_of_fma_peak, 0) << x.name();
    // The parts add up to the clocked step, every kernel has a part, and the step's products,
    // norms, mixer, optimizer and loss each took time.
    double parts = 0;
    for (const StepPart& p : step_parts()) parts += x.*p.seconds;
    EXPECT_NEAR(parts, x.clocked_step, 1e-9 * x.clocked_step) << x.name();
    for (const StepPart& p : step_parts()) EXPECT_GT(x.*p.seconds, 0) << x.name() << " " << p.name;
    EXPECT_GE(x.outside_kernels_s, 0) << x.name();
    EXPECT_LE(x.outside_kernels_s, x.other_s) << x.name();
    EXPECT_NEAR(x.outside_products_share, 1 - x.products_s / x.clocked_step, 1e-12) << x.name();
    // Attention's products are its own kernels' (the attention part): not over the products' time.
    const double products_flops = x.matmul_flops - step_attention_flops(x.model, 2, 16, 2, 4);
    EXPECT_EQ(products_flops < x.matmul_flops, x.model == "gpt") << x.name();
    EXPECT_NEAR(x.products_gflop_per_s, products_flops / x.products_s / 1e9, 1e-9 * x.products_gflop_per_s) << x.name();
    std::map<std::string, double> calls;
    for (const StepRow::Kernel& k : x.kernels) {
      EXPECT_EQ(k.part, step_part_of(k.name)) << k.name;
      calls[k.name] = k.calls;
    }
    EXPECT_EQ(calls["adam_step"], 1) << x.name();
    EXPECT_EQ(calls[x.norm + "_forward"] + calls["add_" + x.norm + "_forward"], x.norm_calls) << x.name();
    EXPECT_EQ(calls[x.model == "gpt" ? "attention_forward" : "prefix_mean_forward"], 2) << x.name();
    if (x.norm == "rmsnorm") {
      EXPECT_GT(x.step_speedup, 0);
      EXPECT_GT(x.op_speedup, 0);
    }
  }
  EXPECT_EQ(r.rows[0].parameters - r.rows[1].parameters, 16 * 5);  // the betas
  // The steps' norm kernels chose their variants (the tests run the rule: NORMLAB_TUNE=off), and
  // the context says which: at least each norm's forward at d = 16.
  int forwards = 0;
  for (const KernelChoiceRecord& k : r.context.kernel_choices) {
    forwards += k.shape_class.rfind("layernorm_forward d=16 ", 0) == 0 || k.shape_class.rfind("rmsnorm_forward d=16 ", 0) == 0;
    EXPECT_FALSE(k.source.empty()) << k.shape_class;
  }
  EXPECT_GE(forwards, 2);
  EXPECT_EQ(r.context.tune_mode, "off");
  const std::string text = render(r, OutputFormat::json);
  EXPECT_NE(text.find("\"kernel_choices\""), std::string::npos);
  StepReport back = step_report_from_json(text, "t");
  ASSERT_EQ(back.rows.size(), 4u);
  EXPECT_EQ(back.rows[1].name(), "step/toy/rmsnorm/threads:1");
  EXPECT_NEAR(back.rows[1].step.median, r.rows[1].step.median, 1e-12);
  EXPECT_NEAR(back.rows[1].products_s, r.rows[1].products_s, 1e-12);
  EXPECT_EQ(back.rows[1].kernels.size(), r.rows[1].kernels.size());
  EXPECT_NE(render(r, OutputFormat::text).find("outside products"), std::string::npos);
  EXPECT_EQ(timed_entries_from_json(text, "t").size(), 8u);
  StepOptions bad = o;
  bad.models = {"bert"};
  EXPECT_THROW(validate(bad), UsageError);
}

// --precision fp32,bf16: each precision's LayerNorm and RMSNorm models, all stepping in turn; a
// bf16 row's steps round what they store (the emulation's rounding kernel runs, as in a bf16 run,
// and never in an fp32 one), its speed-up over the fp32 row of its norm is derived, LayerNorm and
// RMSNorm are paired within a precision, and the rows keep their precision through JSON and CSV.
TEST(BenchStep, Bf16RowsBesideFp32) {
  StepOptions o = tiny_step_options();
  o.models = {"gpt"};
  o.precisions = {Precision::fp32, Precision::bf16};
  StepReport r = run_step_bench(o);
  ASSERT_EQ(r.rows.size(), 4u);
  const std::vector<std::string> names = {"step/gpt/layernorm/threads:1", "step/gpt/rmsnorm/threads:1",
                                          "step/gpt/layernorm/threads:1/bf16", "step/gpt/rmsnorm/threads:1/bf16"};
  for (size_t i = 0; i < 4; ++i) {
    const StepRow& x = r.rows[i];
    EXPECT_EQ(x.name(), names[i]);
    EXPECT_EQ(x.precision, i < 2 ? Precision::fp32 : Precision::bf16);
    double rounding_calls = 0;
    for (const StepRow::Kernel& k : x.kernels)
      if (k.name == "round_to_format") rounding_calls = k.calls;
    EXPECT_EQ(rounding_calls > 0, x.precision == Precision::bf16) << x.name();
    if (x.precision == Precision::bf16) {
      const StepRow& f = r.rows[i - 2];
      EXPECT_EQ(f.norm, x.norm);
      EXPECT_NEAR(x.precision_speedup, f.step.median / x.step.median, 1e-12) << x.name();
      EXPECT_TRUE(std::isnan(x.pct_of_fma_peak)) << x.name();  // the FMA loop is float32's
      EXPECT_TRUE(std::isnan(x.products_pct_of_fma_peak)) << x.name();
    } else {
      EXPECT_TRUE(std::isnan(x.precision_speedup)) << x.name();
      EXPECT_GT(x.pct_of_fma_peak, 0) << x.name();
    }
    if (x.norm == "rmsnorm") {
      EXPECT_NEAR(x.step_speedup, r.rows[i - 1].step.median / x.step.median, 1e-12) << x.name();
    }
  }
  const std::string text = render(r, OutputFormat::json);
  const StepReport back = step_report_from_json(text, "t");
  ASSERT_EQ(back.rows.size(), 4u);
  EXPECT_EQ(back.rows[3].name(), names[3]);
  EXPECT_EQ(back.rows[3].precision, Precision::bf16);
  EXPECT_NEAR(back.rows[3].precision_speedup, r.rows[3].precision_speedup, 1e-12);
  // A document from before bf16 rows (no precision, no precision_speedup) reads as fp32.
  nlohmann::json old = nlohmann::json::parse(text);
  for (auto& b : old["benchmarks"]) {
    b.erase("precision");
    b["counters"].erase("precision_speedup");
  }
  const StepReport before = step_report_from_json(old.dump(), "t");
  EXPECT_EQ(before.rows[1].precision, Precision::fp32);
  EXPECT_TRUE(std::isnan(before.rows[1].precision_speedup));
  // Runs merge row by row, bf16 rows with bf16 rows.
  const StepReport merged = merge_runs({r, back});
  ASSERT_EQ(merged.rows.size(), 4u);
  EXPECT_EQ(merged.rows[3].name(), names[3]);
  EXPECT_EQ(merged.rows[3].runs, 2);
  EXPECT_NEAR(merged.rows[3].precision_speedup, r.rows[3].precision_speedup, 1e-9);
  const std::string table = render(r, OutputFormat::text);
  EXPECT_NE(table.find("vs fp32"), std::string::npos);
  EXPECT_NE(render(r, OutputFormat::csv).find(",bf16,"), std::string::npos);
  StepOptions fp16 = o;
  fp16.precisions = {Precision::fp16};
  EXPECT_THROW(validate(fp16), UsageError);
}

// A new kernel is read in a part of the step's time: each one the backends implement has one.
TEST(StepBench, EveryKernelHasAPartOfTheStep) {
  for (const char* name : {"reference", "cpu"})
    for (const std::string& k : kernels_of(backend(name))) EXPECT_FALSE(step_part_of(k).empty()) << name << " " << k;
  EXPECT_EQ(step_part_of("onednn_matmul"), "products");
  EXPECT_EQ(step_part_of("no_such_kernel"), "");
}

// ---- the command line ----------------------------------------------------------------------------

