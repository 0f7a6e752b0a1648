// The tape: define-by-run reverse mode, as in PyTorch. An op that has an input requiring
// gradients records a Node holding its inputs (the graph's edges) and a backward closure
// that captures exactly what its backward needs. Tensor::backward() walks the nodes in
// reverse creation order, which is a topological order for a define-by-run graph.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "normlab/tensor.h"

namespace normlab {

// Gradient outputs handed to a backward closure: g[i] is nullptr when input i needs no
// gradient; otherwise a tensor of input i's shape and dtype that the closure must WRITE, unless
// it calls g.pass_through(i).
class GradOutputs {
 public:
  Tensor* operator[](size_t i) const { return slots_[i]; }
  size_t size() const { return slots_.size(); }
  // Input i's gradient is dy itself (an identity path such as a residual connection; input i has
  // dy's shape). The engine then hands dy's buffer on, or adds dy to a gradient input i already
  // has, instead of the closure copying it: the residual stream's gradient flows through a deep
  // network without a copy per block.
  void pass_through(size_t i) { identity_[i] = slots_[i] != nullptr; }
  bool passed_through(size_t i) const { return identity_[i]; }

  // The engine's side.
  void reset(size_t n) {
    slots_.assign(n, nullptr);
    identity_.assign(n, false);
  }
  void set(size_t i, Tensor* t) { slots_[i] = t; }

 private:
  std::vector<Tensor*> slots_;
  std::vector<bool> identity_;
};
using BackwardFn = std::function<void(const Tensor& dy, GradOutputs& grads)>;

class Node {
 public:
  Node(const char* op, std::vector<std::shared_ptr<TensorImpl>> inputs, BackwardFn fn);
  const char* op() const { return op_; }
  const char* module() const { return module_; }  // current_module() when it was recorded
  uint64_t sequence() const { return sequence_; }
  const std::vector<std::shared_ptr<TensorImpl>>& inputs() const { return inputs_; }
  bool released() const { return released_; }
  void run_backward(const Tensor& dy, GradOutputs& grads);
  // Frees the saved tensors and the edges: the graph behind this node is gone.
  void release();

 private:
  const char* op_;
  const char* module_;
  uint64_t sequence_;
  std::vector<std::shared_ptr<TensorImpl>> inputs_;
  BackwardFn fn_;
  bool released_ = false;
};

// The arithmetic the engine needs to sum two gradients of one tensor. The ops layer installs it
// (install_gradient_math in ops.h) so that the tape never calls a backend itself.
struct GradientMath {
  void (*accumulate)(Tensor& dst, const Tensor& g) = nullptr;             // dst += g
  void (*add)(Tensor& out, const Tensor& a, const Tensor& b) = nullptr;   // out = a + b
  // dst = src across storage types (float32 <-> bf16 / f16); null: Tensor::copy_ (one dtype).
  void (*convert)(Tensor& dst, const Tensor& src) = nullptr;
  // A gradient has its tensor's format (TensorImpl::format): called on every gradient a backward
  // closure wrote, every sum of two gradients, and every gradient passed through to an input
  // stored in a narrower format than the op's output (a copy), to round g to the format of `of`.
  // Null: nothing is rounded.
  // `from`: the node whose backward computed g (or whose gradient was added).
  void (*store)(Tensor& g, const TensorImpl& of, const Node& from) = nullptr;
};
void set_gradient_math(GradientMath math);

// Leaves moved into one contiguous buffer (and their gradients into another), so that an
// optimizer makes one pass over all of them. Each leaf's own TensorImpl is rebound to its slot:
// every holder of the leaf sees the flat storage. All leaves must share dtype and device.
struct FlatLeaves {
  Tensor values, grads;
};
FlatLeaves flatten_leaves(const std::vector<Tensor>& leaves);
// The same, with the buffers on `device` (leaves elsewhere are copied there): a model built on
// the host trains with its parameters, gradients and optimizer state in device memory.
FlatLeaves flatten_leaves(const std::vector<Tensor>& leaves, Device device);
// After backward: zero the gradient buffer of every leaf that no path reached (its buffer
// holds a stale value), so that a pass over the flat gradient reads zeros there.
void zero_unreached_grads(const std::vector<Tensor>& leaves);

// The part of a model whose ops run on this thread ("blocks.3", "head"; "" outside any scope):
// each node keeps it, so that a value's origin can be named in the backward too.
class ModuleScope {
 public:
  explicit ModuleScope(const std::string& name);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  const char* previous_;
};
const char* current_module();

// True when gradients are being recorded on this thread (the default).
bool grad_enabled();

// Evaluation without a graph: ops inside the scope record nothing.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Used by ops: true when any input requires a gradient and recording is on.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
// Used by ops: makes `out` the output of a new node. `inputs` are the op's differentiable
// inputs, in the order the closure's GradOutputs follow.
void record(const char* op, Tensor& out, const std::vector<Tensor>& inputs, BackwardFn fn);

}  // namespace normlab
