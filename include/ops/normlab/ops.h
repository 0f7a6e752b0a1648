// Differentiable ops: each checks shapes at the boundary (messages name both shapes),
// allocates its outputs, calls the backend's kernels, and records its backward on the tape.
// Ops never loop over data.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "normlab/kinds.h"
#include "normlab/precision.h"
#include "normlab/tensor.h"

namespace normlab {

// ---- products -------------------------------------------------------------------
// x (..., K) @ w^T with w (N, K) as PyTorch's Linear, + bias (N) when defined, + residual
// (..., N) when defined: (..., N). With a residual it is a pre-norm block's "x + proj(h)" in one
// op: the add happens in the product's epilogue and the gradient passes through uncopied.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(),
              const Tensor& residual = Tensor());
// linear(gelu(h), w, bias, residual) as one op (an MLP's second layer with its activation):
// GELU's derivative, saved by the forward, is applied in the epilogue of the product that
// computes dh, instead of in a pass of its own.
Tensor gelu_linear(const Tensor& h, const Tensor& w, const Tensor& bias = Tensor(),
                   const Tensor& residual = Tensor());
// a (..., M, K) @ b (..., K, N) with equal leading dims (or b 2-D, shared): (..., M, N).
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- elementwise ----------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
// alpha*a + b: DeepNorm's residual (alpha*x + F(x)).
Tensor add_scaled(const Tensor& a, double alpha, const Tensor& b);
Tensor scale(const Tensor& x, double alpha);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor gelu(const Tensor& x);  // exact erf form
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator*(double alpha, const Tensor& x) { return scale(x, alpha); }

// ---- normalization over the last dimension --------------------------------------------
Tensor layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                 double eps = default_eps(NormKind::layernorm));
Tensor rmsnorm(const Tensor& x, const Tensor& gamma, double eps = default_eps(NormKind::rmsnorm));
// Fused residual add + norm (one pass per row): s = alpha*a + b, y = norm(s); returns {s, y}.
// The backward is that of the two separate ops.
std::pair<Tensor, Tensor> add_layernorm(const Tensor& a, double alpha, const Tensor& b, const Tensor& gamma,
                                        const Tensor& beta, double eps = default_eps(NormKind::layernorm));
std::pair<Tensor, Tensor> add_rmsnorm(const Tensor& a, double alpha, const Tensor& b,
                                      const Tensor& gamma, double eps = default_eps(NormKind::rmsnorm));

// ---- a norm of any kind, as a model holds it ------------------------------------------
// A norm's learned tensors in the order its module creates them (its checkpoint's order): the name
// after the module's prefix, d values or one, and the initial value. "gamma" is the gain, which a
// model with Gemma's offset stores as w = gamma - 1 instead (nn's choice, not the op's).
struct NormParameter {
  enum class Init { one, zero, squash_alpha };  // squash_alpha: DyT's and Derf's configured alpha
  const char* name;
  bool per_channel;
  Init init;
  bool is_gain() const { return std::string(name) == "gamma"; }
};
// Every norm's table row (src/ops/norm.cpp): a new norm is a row there, its kernels and its cases.
const std::vector<NormParameter>& norm_parameters(NormKind kind);
// The norm of `kind` over x's last dimension, its learned tensors in norm_parameters' order (the
// gain as applied); x itself for NormKind::none. A norm without a named op above is reached here.
Tensor apply_norm(NormKind kind, const Tensor& x, const std::vector<Tensor>& params, double eps);

// ---- elementwise normalizers, scales ----------------------------------------------
// DyT (Zhu et al. 2025): gamma * tanh(alpha*x) + beta. Derf: gamma * erf(alpha*x + shift) + beta.
// alpha and shift hold one value each (learned scalars); gamma, beta (D); beta may be undefined.
Tensor dyt(const Tensor& x, const Tensor& alpha, const Tensor& gamma, const Tensor& beta);
Tensor derf(const Tensor& x, const Tensor& alpha, const Tensor& shift, const Tensor& gamma, const Tensor& beta);
// x * lambda over the last dimension, lambda (D) (LayerScale's diag(lambda)) or (1) (ReZero's and
// SkipInit's scalar).
Tensor channel_scale(const Tensor& x, const Tensor& lambda);
// x + c, every element (Gemma's gain 1 + w); the gradient passes through.
Tensor add_constant(const Tensor& x, double c);

// ---- dropout --------------------------------------------------------------------
// Training's dropout, on this thread while a DropoutScope lives: dropout(x) zeroes each element
// with probability `rate` and scales the rest by 1 / (1 - rate) (PyTorch's), and causal_attention
// does the same to its probabilities (nanoGPT's attn_dropout). Each call inside the scope draws its
// own mask, keyed by (key, the call's number in the scope): a scope made again with the same key
// and the same calls in the same order draws the same masks (a step's forward repeated), and the
// backward regenerates its forward's. Outside a scope, or at rate 0, both are the identity
// (evaluation). Scopes nest; the innermost applies.
class DropoutScope {
 public:
  DropoutScope(double rate, uint64_t key);  // rate in [0, 1): Error otherwise
  ~DropoutScope();
  DropoutScope(const DropoutScope&) = delete;
  DropoutScope& operator=(const DropoutScope&) = delete;

 private:
  double previous_rate_;
  uint64_t previous_key_, previous_calls_;
};
// True inside a DropoutScope of a rate above 0 (a model's sublayers then add their residual
// after the dropout instead of in their last product).
bool dropout_active();
// The key of training step `step` of a run seeded `seed`: its own for every (seed, step).
uint64_t dropout_step_key(uint64_t seed, int64_t step);
Tensor dropout(const Tensor& x);

// ---- softmax, attention, mixing -------------------------------------------------
Tensor softmax(const Tensor& x);  // over the last dimension
// Causal multi-head scaled-dot-product attention: q, k, v (B, T, C) with C = heads * Dh;
// scale 1/sqrt(Dh); inside a DropoutScope, dropout on its probabilities. Returns (B, T, C).
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads);
// Multi-head attention that sees every key: q (B, T, C) over k and v (B, Tk, C), any Tk >= 1 (an
// encoder's self-attention with k, v of the same sequence; a decoder's cross-attention to the
// encoder's output). The same kernels, dropout scope and precision as causal_attention.
Tensor full_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads);
// The toy model's stand-in for attention: y[b,t] = mean of x[b,0..t]. x (B, T, C).
Tensor prefix_mean(const Tensor& x);

// ---- lookup and loss ------------------------------------------------------------
// ids int32 (any shape, values in [0, V)), table (V, D): shape ids.shape + (D,).
Tensor embedding(const Tensor& ids, const Tensor& table);
// logits (..., V), targets int32 (...): mean cross-entropy, a one-element tensor.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);

// ---- not recorded ---------------------------------------------------------------
// sum of squares of every element (a gradient norm's square); no graph.
double sum_squares(const Tensor& x);
// Gives the tape its gradient arithmetic (dst += g, out = a + b) through the backends; done once
// by install_backends() before any backward.
void install_gradient_math();

// ---- low-precision storage (docs/precision.md) ----------------------------------
// Inside a StoragePrecisionScope(bf16 or fp16), on this thread: mixed precision with float32
// master weights, emulated in float32 storage on the cpu and stored natively on CUDA (below). Every op computes in float32 from stored operands
// and rounds its output once (as fused); every gradient is stored in its tensor's format
// (TensorImpl::format), and so is every sum of two gradients. A leaf input (a parameter, an
// input batch) is used through a rounded copy whose gradient reaches the float32 leaf as
// computed. Products (linear, matmul, attention, embedding) store in the scope's format and cast
// any operand that is not; every other op stores in the widest format of its inputs, so a
// float32 residual stream plus a low-precision branch stays float32, as PyTorch's autocast
// promotes it. Exceptions, as autocast has them: cross_entropy's loss stays float32 (its logits'
// gradient is stored), and a norm's statistics (mean, rstd) are float32. `residual`: the format
// residual_stream() gives the stream (the scope's format, or fp32). Call backward() inside the
// scope. fp32, the default, changes nothing.
class StoragePrecisionScope {
 public:
  // `norm`: how layernorm and rmsnorm run on an input stored in the format (precision.h):
  // format, the composite (composite_norm_row, each intermediate rounded; its backward op by op,
  // composite_norm_row_backward); fp32 and fused, float32
  // statistics with the output rounded once (one arithmetic in this emulation).
  explicit StoragePrecisionScope(Precision p, std::optional<Precision> residual = std::nullopt,
                                 NormCompute norm = NormCompute::fused);
  ~StoragePrecisionScope();
  StoragePrecisionScope(const StoragePrecisionScope&) = delete;
  StoragePrecisionScope& operator=(const StoragePrecisionScope&) = delete;

 private:
  Precision previous_, previous_residual_;
  NormCompute previous_norm_;
};
Precision storage_precision();
// On a CUDA device (cuda, cuda-sim) the scope stores natively by default: activations and their
// gradients in bf16 / f16 storage (2 bytes, DType bf16 / f16), each kernel computing in float32
// and rounding once at its store; parameters, their gradients, optimizer state and statistics
// stay float32. The values are those of the emulation (float32 storage rounded after each op),
// bit for bit, with half the bytes; off, CUDA emulates as the cpu does. A StoreWatch sees values
// before their rounding, so ops run emulated while one is alive (train's log-step statistics and
// non-finite search). Process-wide; for tests and comparisons.
void set_native_low_precision(bool on);
bool native_low_precision();
// The residual stream as it starts (the embeddings' sum): x in the scope's residual format (a
// float32 copy of a low-precision x, exact; its gradient is rounded back to x's format).
// Everything the stream then passes through keeps that format by the widest-input rule.
Tensor residual_stream(const Tensor& x);

// ---- looking at what is stored --------------------------------------------------
// Every value an op is about to store (its output, or a gradient its backward computed) and
// every norm's input, before it is rounded: what train's per-layer statistics and its
// non-finite diagnosis look at. Nothing is called unless a StoreWatchScope is alive on the
// thread (in any precision, fp32 included).
enum class StoredKind : uint8_t { output, gradient, norm_input };
struct StoreEvent {
  const Tensor& value;  // float32, not yet rounded
  Precision format;     // what it is stored in
  StoredKind kind;
  const char* op;      // "linear", "layernorm", ...
  const char* module;  // autograd's current_module() where the op ran ("blocks.3"; "" outside)
  const Tensor* norm_rstd = nullptr;  // a norm's output: its rows' stored rstd
  // Set for a step inside one op's backward (the composite norm's: `op` names the step, e.g.
  // "layernorm: torch.rsqrt backward ..."): what that step stored, counted by the kernel; `value`
  // is then the op's incoming gradient, not the step's values.
  const FormatCensus* census = nullptr;
};
using StoreWatch = std::function<void(const StoreEvent&)>;
class StoreWatchScope {
 public:
  explicit StoreWatchScope(StoreWatch watch);
  ~StoreWatchScope();
  StoreWatchScope(const StoreWatchScope&) = delete;
  StoreWatchScope& operator=(const StoreWatchScope&) = delete;

 private:
  StoreWatch* previous_;
  StoreWatch watch_;
};

// ---- layout ---------------------------------------------------------------------
Tensor reshape(const Tensor& x, const Shape& shape);  // a view; -1 infers one dimension
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);  // materialized

}  // namespace normlab
