// What the files of src/opcases share: a case's line, the draws of its inputs, and the lists each
// op file adds its cases and grad forms to (case_registry.cpp calls them in order).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "normlab/matmul_kernels.h"
#include "normlab/opcases.h"
#include "normlab/rng.h"

namespace normlab::opcases::detail {

// The words after a case's op: "rows=7 d=65 eps=1e-06 seed=904" (doubles in %g).
class Params {
 public:
  Params& add(const char* key, int64_t v);
  Params& add(const char* key, double v);
  Params& add(const char* key, const char* v);
  std::string str() const { return s_; }

 private:
  std::string s_;
};

// float64 tensors of N(mean, std^2) values from (seed, stream::check): the same values whatever
// dtype a mode converts them to.
struct Draw {
  explicit Draw(uint64_t seed) : rng(seed, stream::check) {}
  Tensor normal(const Shape& s, double std = 1.0, double mean = 0.0);
  // int32 values uniform in [0, bound): token ids, targets.
  Tensor ids(const Shape& s, int64_t bound);
  Rng rng;
};

// The tensors of `from` named, in that order: what one case of a family takes of its draws.
Tensors only(const Tensors& from, const std::vector<std::string>& names);

// The inputs an op-level (grad) form takes from its cases' draws, converted to `dtype` and
// requiring gradients, in the order named.
std::vector<std::pair<std::string, Tensor>> leaves(const Tensors& drawn, const std::vector<std::string>& names,
                                                   DType dtype);

// Rows x d shapes of the norm-like cases: odd and long rows. The last two are too long for the
// CUDA backward's one-read kernel (its column sums in shared memory: 2*d floats for LayerNorm, d
// for RMSNorm, at most 192 KiB) and for the forward's row cache (d floats, at most 96 KiB): the
// per-row dx kernel, the column reductions and the uncached forward run only on these.
inline constexpr int64_t kRowShapes[][2] = {{1, 1},    {1, 3},    {7, 1},    {7, 3},    {7, 65},
                                            {1, 1000}, {7, 1000}, {64, 512}, {512, 64}, {3, 4096},
                                            {5, 4097}, {37, 256}, {2, 49153}, {3, 49156}};

// How an op's case of any rows x d is made (the seed its cases draw from): find_case's made-to-order
// lines.
struct SizedMaker {
  std::string op;
  std::function<OpCase(int64_t rows, int64_t d, uint64_t seed)> make;
};
void add_elementwise_makers(std::vector<SizedMaker>& makers);  // n values: rows x d
void add_norm_makers(std::vector<SizedMaker>& makers);
void add_squash_makers(std::vector<SizedMaker>& makers);
// The matmul case of a product of any shape (find_case's 'matmul m=768 n=384 k=128 tb=1'), drawn
// as the registry's matmul cases are.
OpCase matmul_case_of(const MatmulSpec& spec, uint64_t seed);

void add_matmul_cases(std::vector<OpCase>& cases);
void add_matmul_grad_forms(std::vector<GradForm>& forms);
void add_elementwise_cases(std::vector<OpCase>& cases);
void add_elementwise_grad_forms(std::vector<GradForm>& forms);
// x + 1 (Gemma's gain): gradcheck lists it after the squash family's forms, beside which the ops
// define it (ops/squash.cpp).
void add_constant_grad_form(std::vector<GradForm>& forms);
void add_format_cases(std::vector<OpCase>& cases);
void add_norm_cases(std::vector<OpCase>& cases);
void add_norm_grad_forms(std::vector<GradForm>& forms);
void add_squash_cases(std::vector<OpCase>& cases);
void add_squash_grad_forms(std::vector<GradForm>& forms);
void add_softmax_cases(std::vector<OpCase>& cases);
void add_softmax_grad_forms(std::vector<GradForm>& forms);
void add_attention_cases(std::vector<OpCase>& cases);
void add_attention_grad_forms(std::vector<GradForm>& forms);
void add_token_cases(std::vector<OpCase>& cases);
void add_token_grad_forms(std::vector<GradForm>& forms);
void add_layout_cases(std::vector<OpCase>& cases);
void add_layout_grad_forms(std::vector<GradForm>& forms);

}  // namespace normlab::opcases::detail
