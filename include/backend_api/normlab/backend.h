// The backend interface: every kernel an op may call. Ops (src/ops) check shapes, allocate
// outputs and call these; backends implement them and never see the tape.
//
// Conventions (all backends):
// - Every tensor argument is contiguous, row-major, and already has the right shape and
//   dtype; outputs are allocated by the caller. Size letters: B batch, T time, C channels
//   (C = H * Dh), H heads, Dh head size, N rows (= B*T), D or d normalized size, V vocabulary,
//   M/K/N for matrix products.
// - Outputs and gradients are WRITTEN (=), never accumulated, unless a kernel's comment says
//   `accumulate`. The tape accumulates when a tensor feeds several consumers.
// - A gradient output passed as nullptr is not wanted: skip its work (ATen's gradient mask).
// - Norms save rstd = 1/sqrt(var + eps) (LayerNorm) or 1/sqrt(mean(x^2) + eps) (RMSNorm), one
//   per row, in the input's dtype; backends that use oneDNN convert its variance at the boundary.
// - `eps`, `alpha`, `scale`, `lr`... are passed as double and used in the tensor's dtype.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "normlab/precision.h"
#include "normlab/tensor.h"

namespace normlab {

// One batch of matrix products: for each b < batch, C_b (M x N) = op(A_b) @ op(B_b), op(X) = X^T
// when trans_x. A_b is (M x K), or (K x M) stored when trans_a; B_b is (K x N), or (N x K) when
// trans_b. a_batched / b_batched false: the same A (or B) for every b (shared weights).
// accumulate: C += product instead of C = product.
//   MatmulSpec::of(m, n, k).batched(b).transposed_a()
struct MatmulSpec {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool a_batched = true, b_batched = true;
  bool accumulate = false;

  static MatmulSpec of(int64_t m_, int64_t n_, int64_t k_) {
    MatmulSpec s;
    s.m = m_;
    s.n = n_;
    s.k = k_;
    return s;
  }
  MatmulSpec& batched(int64_t b) { batch = b; return *this; }
  MatmulSpec& transposed_a() { trans_a = true; return *this; }
  MatmulSpec& transposed_b() { trans_b = true; return *this; }
  MatmulSpec& shared_b(bool shared = true) { b_batched = !shared; return *this; }
};

struct AdamParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = true;  // AdamW (decoupled decay, applied as p -= lr*wd*p) vs Adam (L2 added to grad)
  int64_t step = 1;       // 1-based step for bias correction
};

// A kernel variant a backend chose on this machine for a shape class (the cpu backend: its norm
// kernels' measured choices, cpu_kernels.h norm_choice), recorded in every run's result.json.
struct KernelChoice {
  std::string kernel;   // the shape class: "layernorm_forward d=64 l2 t=2"
  std::string variant;  // what ran: "pipelined-pf2", "onednn"
  std::string source;   // "measured", "cached", "forced (...)", "rule (...)"
};

// Every kernel here is a non-virtual entry that checks the call against the kernel's size contract
// (each tensor defined where the kernel needs it, on the backend's device, holding the number of
// elements its size arguments imply: stated once, in src/backend_api/kernel_contracts.cpp) and then
// calls the backend's implementation, the private virtual <kernel>_impl. A backend checks only
// what is its own: the dtypes it supports, values such as ids in range. A new op declares its
// kernels itself instead, with their contract, and each backend registers its implementation
// beside the kernel's code (kernel.h).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual bool supports(DType dtype) const = 0;
  // Expensive objects (oneDNN primitives) created so far; a steady-state step adds none.
  virtual uint64_t primitives_created() const { return 0; }
  // The variants chosen so far in this process, in the order their shape classes were first used.
  virtual std::vector<KernelChoice> kernel_choices() const { return {}; }

  // ---- matrix products ---------------------------------------------------------
  // c = the products `s` describes (MatmulSpec, above).
  void matmul(Tensor& c, const Tensor& a, const Tensor& b, const MatmulSpec& s);
  // y (M x N) = x (M x K) @ w^T (w is N x K, PyTorch's Linear layout) + bias (N) + residual
  // (M x N); bias and residual optional (undefined tensor = none). The residual add is fused into
  // the product's epilogue: a pre-norm block's "x + proj(...)" costs no pass of its own.
  void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Tensor& residual, int64_t m, int64_t k, int64_t n);
  void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias, int64_t m,
                      int64_t k, int64_t n) {
    linear_forward(y, x, w, bias, Tensor(), m, k, n);
  }
  // The linear layer's input gradient, dx (M x K) = (dy (M x N) @ w (N x K)) * gate (M x K),
  // gate optional: the derivative of an elementwise op in front of the layer (GELU's), applied
  // in the product's epilogue instead of a separate pass.
  void linear_backward_input(Tensor& dx, const Tensor& dy, const Tensor& w,
                             const Tensor& gate, int64_t m, int64_t k, int64_t n);
  // dbias (N) = sum over the M rows of dy (M x N).
  void sum_rows(Tensor& out, const Tensor& x, int64_t rows, int64_t cols);

  // ---- elementwise over n = numel values -----------------------------------------
  void fill(Tensor& out, double value);
  void copy(Tensor& out, const Tensor& x);
  // out = alpha * a + beta * b
  void add(Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta);
  // dst += src (accumulate)
  void accumulate(Tensor& dst, const Tensor& src);
  void scale(Tensor& out, const Tensor& x, double alpha);
  void mul(Tensor& out, const Tensor& a, const Tensor& b);
  // GELU, exact erf form (PyTorch's default): y = x * Phi(x), Phi(x) = 0.5 * (1 + erf(x / sqrt(2))).
  // dydx (optional) = Phi(x) + x * phi(x): the backward is then dx = dy * dydx, one multiply,
  // because erf and exp are computed once, here, while x is in registers.
  void gelu_forward(Tensor& y, Tensor* dydx, const Tensor& x);
  // sum of x^2 over all elements, accumulated in double (for norms of activations/gradients)
  double sum_squares(const Tensor& x);
  // Every value of x rounded in place to a format's grid (precision.h: nearest even, overflow to
  // inf, gradual underflow): how bf16/fp16 storage is emulated in float32. fp32 changes nothing.
  // A float64 tensor is rounded through float32, as PyTorch converts a double to half.
  void round_to_format(Tensor& x, Precision format);
  // x's values as `format` would store them, counted (precision.h, FormatCensus): float32 x.
  // Not on a step's path: train's per-layer statistics and its non-finite diagnosis.
  FormatCensus format_census(const Tensor& x, Precision format);




  // ---- softmax over the last dimension: x is (N x D) ---------------------------
  void softmax_forward(Tensor& y, const Tensor& x, int64_t n, int64_t d);
  // dx = y * (dy - sum(dy*y))
  void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y, int64_t n,
                        int64_t d);

  // ---- causal multi-head scaled-dot-product attention --------------------------
  // q, k, v, out: (B, T, H*Dh), head h uses channels [h*Dh, (h+1)*Dh).
  // probs (B, H, T, T): softmax over s <= t of scale * q_t . k_s, zero for s > t (saved).
  // out_t = sum_s probs[t,s] v_s.
  void attention_forward(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k,
                         const Tensor& v, int64_t b, int64_t t, int64_t h, int64_t dh,
                         double scale);
  // dP = dout v^T; dv = P^T dout; dS = P*(dP - rowsum(dP*P)) * scale; dq = dS k; dk = dS^T q.
  void attention_backward(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout,
                          const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& probs, int64_t b, int64_t t, int64_t h,
                          int64_t dh, double scale);

  // ---- causal prefix mean (the toy model's mixing): x, y (B, T, C) --------------
  // y[b,t] = (1/(t+1)) * sum_{s<=t} x[b,s]
  void prefix_mean_forward(Tensor& y, const Tensor& x, int64_t b, int64_t t,
                           int64_t c);
  // dx[b,s] = sum_{t>=s} dy[b,t] / (t+1)
  void prefix_mean_backward(Tensor& dx, const Tensor& dy, int64_t b, int64_t t,
                            int64_t c);

  // ---- embedding: ids (N) int32 in [0, V), table (V x D), y (N x D) ---------------
  void embedding_forward(Tensor& y, const Tensor& table, const Tensor& ids, int64_t n,
                         int64_t v, int64_t d);
  // dtable (V x D) = scatter-add of dy rows at ids (written: rows not hit are zero).
  void embedding_backward(Tensor& dtable, const Tensor& dy, const Tensor& ids, int64_t n,
                          int64_t v, int64_t d);

  // ---- cross-entropy, mean over N rows: logits (N x V), targets (N) int32 -------
  // loss (one element) = mean_i [logsumexp(logits_i) - logits_i[target_i]]; probs = softmax (saved).
  void cross_entropy_forward(Tensor& loss, Tensor& probs, const Tensor& logits,
                             const Tensor& targets, int64_t n, int64_t v);
  // dlogits = dloss * (probs - onehot(target)) / N, dloss is a one-element tensor.
  void cross_entropy_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& probs,
                              const Tensor& targets, int64_t n, int64_t v);

  // ---- layout -----------------------------------------------------------------
  // x viewed as (outer, A, mid, Bdim, inner) -> out (outer, Bdim, mid, A, inner): swaps two axes.
  void transpose(Tensor& out, const Tensor& x, int64_t outer, int64_t a, int64_t mid,
                 int64_t bdim, int64_t inner);

  // ---- statistics of a log step (recorded, never differentiated) --------------
  // Reduced where the tensors live, so that a device-resident run downloads per-row results
  // only. Sums and dot products in double.
  // norms[i] = sqrt(sum_j x[i, j]^2) over N rows of D (the residual stream's token norms).
  void row_norms(Tensor& norms, const Tensor& x, int64_t n, int64_t d);
  // Per (b, h, t) row (max_logit and entropy are (B, H, T)) of the causal attention logits
  // l_s = scale * q_t . k_s, s <= t (q, k: (B, T, H*Dh)): max_logit = max_s l_s; entropy =
  // -sum_s p_s log p_s of p = softmax(l), as log Z - sum_s e_s (l_s - max) / Z, e_s = exp(l_s - max).
  void attention_logit_stats(Tensor& max_logit, Tensor& entropy, const Tensor& q, const Tensor& k,
                             int64_t b, int64_t t, int64_t h, int64_t dh, double scale);

  // ---- optimizer: one pass over n parameters (all parameters live in one buffer) ----
  // m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; p -= lr * (mhat/(sqrt(vhat)+eps) [+ wd*p])
  void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                 const AdamParams& hp);

 private:
  // What each backend implements: the entries above call these once the call's tensors hold the
  // sizes its arguments imply (kernel_contracts.cpp, the non-virtual-interface idiom), so that no
  // backend restates a kernel's size contract. Backends override these, never the entries.
  virtual void matmul_impl(Tensor& c, const Tensor& a, const Tensor& b, const MatmulSpec& s) = 0;
  virtual void linear_forward_impl(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
      const Tensor& residual, int64_t m, int64_t k, int64_t n) = 0;
  virtual void linear_backward_input_impl(Tensor& dx, const Tensor& dy, const Tensor& w, const Tensor& gate,
      int64_t m, int64_t k, int64_t n) = 0;
  virtual void sum_rows_impl(Tensor& out, const Tensor& x, int64_t rows, int64_t cols) = 0;
  virtual void fill_impl(Tensor& out, double value) = 0;
  virtual void copy_impl(Tensor& out, const Tensor& x) = 0;
  virtual void add_impl(Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) = 0;
  virtual void accumulate_impl(Tensor& dst, const Tensor& src) = 0;
  virtual void scale_impl(Tensor& out, const Tensor& x, double alpha) = 0;
  virtual void mul_impl(Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual void gelu_forward_impl(Tensor& y, Tensor* dydx, const Tensor& x) = 0;
  virtual double sum_squares_impl(const Tensor& x) = 0;
  virtual void round_to_format_impl(Tensor& x, Precision format) = 0;
  virtual FormatCensus format_census_impl(const Tensor& x, Precision format) = 0;
  virtual void softmax_forward_impl(Tensor& y, const Tensor& x, int64_t n, int64_t d) = 0;
  virtual void softmax_backward_impl(Tensor& dx, const Tensor& dy, const Tensor& y, int64_t n, int64_t d) = 0;
  virtual void attention_forward_impl(Tensor& out, Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v,
      int64_t b, int64_t t, int64_t h, int64_t dh, double scale) = 0;
  virtual void attention_backward_impl(Tensor* dq, Tensor* dk, Tensor* dv, const Tensor& dout, const Tensor& q,
      const Tensor& k, const Tensor& v, const Tensor& probs, int64_t b, int64_t t, int64_t h, int64_t dh,
      double scale) = 0;
  virtual void prefix_mean_forward_impl(Tensor& y, const Tensor& x, int64_t b, int64_t t, int64_t c) = 0;
  virtual void prefix_mean_backward_impl(Tensor& dx, const Tensor& dy, int64_t b, int64_t t, int64_t c) = 0;
  virtual void embedding_forward_impl(Tensor& y, const Tensor& table, const Tensor& ids, int64_t n, int64_t v,
      int64_t d) = 0;
  virtual void embedding_backward_impl(Tensor& dtable, const Tensor& dy, const Tensor& ids, int64_t n, int64_t v,
      int64_t d) = 0;
  virtual void cross_entropy_forward_impl(Tensor& loss, Tensor& probs, const Tensor& logits, const Tensor& targets,
      int64_t n, int64_t v) = 0;
  virtual void cross_entropy_backward_impl(Tensor& dlogits, const Tensor& dloss, const Tensor& probs,
      const Tensor& targets, int64_t n, int64_t v) = 0;
  virtual void transpose_impl(Tensor& out, const Tensor& x, int64_t outer, int64_t a, int64_t mid, int64_t bdim,
      int64_t inner) = 0;
  virtual void row_norms_impl(Tensor& norms, const Tensor& x, int64_t n, int64_t d) = 0;
  virtual void attention_logit_stats_impl(Tensor& max_logit, Tensor& entropy, const Tensor& q, const Tensor& k,
      int64_t b, int64_t t, int64_t h, int64_t dh, double scale) = 0;
  virtual void adam_step_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& hp) = 0;
};

// ---- registry -----------------------------------------------------------------
// Names: "reference" (plain loops, f32/f64: the oracle), "cpu" (oneDNN + normlab's vectorized
// kernels, f32), "cuda" (when built and a GPU is present).
// Adds (or replaces) a backend under `name`; install_backends() does it for the built-in ones.
void register_backend(const std::string& name, std::unique_ptr<Backend> b);
// Adds (or replaces) a backend made on first use: `make` runs once, at the first lookup of
// `name`, and what it throws is thrown again by every lookup. The CUDA backends are registered
// so: a command that never asks for them never loads the CUDA libraries.
void register_backend_factory(const std::string& name, std::function<std::unique_ptr<Backend>()> make);
// The backends that are usable: a backend made on first use is made here (a name whose
// factory throws is left out).
std::vector<std::string> backend_names();
Backend& backend(const std::string& name);  // throws UsageError for an unknown name
// The backend ops use for CPU tensors (default "cpu"); CUDA tensors always use "cuda".
Backend& backend_for(Device device, DType dtype);
void set_default_cpu_backend(const std::string& name);
const std::string& default_cpu_backend();
// Where train, sweep and probe put a model's parameters, optimizer state and batches: the cpu
// (default) or a CUDA device (--device cuda / cuda-sim), whose backend then runs every op on
// tensors that stay there (docs/cuda.md, device residency).
void set_compute_device(Device device);
Device compute_device();

// RAII: use another CPU backend inside a scope (gradcheck runs on "reference").
class BackendScope {
 public:
  explicit BackendScope(const std::string& name);
  ~BackendScope();
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;

 private:
  std::string previous_;
};

// Threads the CPU kernels and oneDNN may use (OpenMP); 0 = all cores.
void set_num_threads(int n);
int num_threads();

// The thread count is process-wide: a scope that sets it restores the previous count when it
// ends, by an exception too. set() changes it again within the scope (a bench over 1, 2, all threads),
// restore() puts the previous count back early.
class ThreadCountScope {
 public:
  ThreadCountScope() : previous_(num_threads()) {}
  explicit ThreadCountScope(int n) : ThreadCountScope() { set_num_threads(n); }
  ~ThreadCountScope() { set_num_threads(previous_); }
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;
  void set(int n) { set_num_threads(n); }
  void restore() { set_num_threads(previous_); }

 private:
  int previous_;
};

}  // namespace normlab
