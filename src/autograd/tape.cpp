// The tape and the backward engine.
#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_set>

#include "normlab/autograd.h"

namespace normlab {

namespace {
thread_local bool t_grad_enabled = true;
thread_local uint64_t t_next_sequence = 0;
}  // namespace

Node::Node(const char* op, std::vector<std::shared_ptr<TensorImpl>> inputs, BackwardFn fn)
    : op_(op), module_(current_module()), sequence_(t_next_sequence++), inputs_(std::move(inputs)), fn_(std::move(fn)) {}

void Node::run_backward(const Tensor& dy, GradOutputs& grads) {
  NL_CHECK(!released_,
           "backward through the graph a second time (op '{}'): its saved tensors were freed by "
           "the first backward(); build the graph again",
           op_);
  fn_(dy, grads);
}

void Node::release() {
  fn_ = nullptr;
  inputs_.clear();
  inputs_.shrink_to_fit();
  released_ = true;
}

namespace {
GradientMath g_gradient_math;

const GradientMath& gradient_math() {
  NL_CHECK(g_gradient_math.accumulate != nullptr && g_gradient_math.add != nullptr,
           "no gradient arithmetic installed: call install_backends() first");
  return g_gradient_math;
}
}  // namespace

void set_gradient_math(GradientMath math) { g_gradient_math = math; }

FlatLeaves flatten_leaves(const std::vector<Tensor>& leaves) {
  return leaves.empty() ? FlatLeaves{} : flatten_leaves(leaves, leaves[0].device());
}

FlatLeaves flatten_leaves(const std::vector<Tensor>& leaves, Device device) {
  FlatLeaves flat;
  if (leaves.empty()) return flat;
  const DType dtype = leaves[0].dtype();
  const Device from = leaves[0].device();
  int64_t count = 0;
  for (const Tensor& p : leaves) count += p.numel();
  flat.values = Tensor::empty({count}, dtype, device);
  flat.grads = Tensor::zeros({count}, dtype, device);
  int64_t offset = 0;
  for (const Tensor& p : leaves) {
    NL_CHECK(p.dtype() == dtype && p.device() == from, "flatten: parameter {} has another dtype or device",
             p.name());
    Tensor dst = flat.values.view_at(offset, p.shape());
    dst.copy_(p.device() == device ? p : p.to_device(device));
    TensorImpl& impl = p.impl();
    impl.storage = dst.impl().storage;
    impl.offset = dst.impl().offset;
    impl.device = device;
    impl.grad = flat.grads.view_at(offset, p.shape()).impl_ptr();
    impl.grad_valid = false;
    offset += p.numel();
  }
  return flat;
}

void zero_unreached_grads(const std::vector<Tensor>& leaves) {
  for (const Tensor& p : leaves) {
    TensorImpl& impl = p.impl();
    if (impl.grad_valid || !impl.grad) continue;
    Tensor(impl.grad).fill_(0.0);
    impl.grad_valid = true;
  }
}

bool grad_enabled() { return t_grad_enabled; }

namespace {
thread_local const char* t_module = "";
// Module names live as long as the process: a node may outlive the scope that named it. Few
// distinct names exist (one per block), so the set stays small.
const char* intern(const std::string& name) {
  static std::mutex mu;
  static std::unordered_set<std::string> names;
  std::lock_guard<std::mutex> lock(mu);
  return names.insert(name).first->c_str();
}
}  // namespace

ModuleScope::ModuleScope(const std::string& name) : previous_(t_module) { t_module = intern(name); }
ModuleScope::~ModuleScope() { t_module = previous_; }
const char* current_module() { return t_module; }

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void record(const char* op, Tensor& out, const std::vector<Tensor>& inputs, BackwardFn fn) {
  std::vector<std::shared_ptr<TensorImpl>> edges;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) edges.push_back(t.impl_ptr());
  out.impl().grad_fn = std::make_shared<Node>(op, std::move(edges), std::move(fn));
  out.impl().requires_grad = true;
}

namespace {

bool same_layout(const TensorImpl& a, const TensorImpl& b) {
  return a.shape == b.shape && a.dtype == b.dtype && a.device == b.device;
}

// An input stored in a low-precision format fed an op whose output is in another (wider) one.
bool narrower(const TensorImpl& in, const TensorImpl& out) {
  return in.format != Precision::fp32 && in.format != out.format;
}

// Every tensor with a history that the root depends on, latest node first. Holding the
// shared_ptrs keeps each intermediate alive until its node has run.
std::vector<std::shared_ptr<TensorImpl>> backward_order(const std::shared_ptr<TensorImpl>& root) {
  std::vector<std::shared_ptr<TensorImpl>> order;
  std::unordered_set<const TensorImpl*> seen;
  std::vector<std::shared_ptr<TensorImpl>> stack{root};
  seen.insert(root.get());
  while (!stack.empty()) {
    auto t = stack.back();
    stack.pop_back();
    if (!t->grad_fn) continue;
    NL_CHECK(!t->grad_fn->released(),
             "backward through the graph a second time (op '{}'): its saved tensors were freed by "
             "the first backward(); build the graph again",
             t->grad_fn->op());
    order.push_back(t);
    for (const auto& in : t->grad_fn->inputs())
      if (in->requires_grad && seen.insert(in.get()).second) stack.push_back(in);
  }
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a->grad_fn->sequence() > b->grad_fn->sequence(); });
  return order;
}

// One backward pass from `root`: each node run once, latest first, its inputs' gradients summed
// in place wherever no one else holds the buffer.
class Engine {
 public:
  explicit Engine(std::shared_ptr<TensorImpl> root) : root_(std::move(root)) {}
  void run(const Tensor& seed) {
    const std::vector<std::shared_ptr<TensorImpl>> order = backward_order(root_);
    // The seed becomes the root's gradient (a copy: the caller keeps its tensor).
    accumulate_into(*root_, seed.clone(), nullptr);  // the seed is as given
    for (const auto& t : order) run_node(t);
  }

 private:
  void accumulate_into(TensorImpl& t, const Tensor& g, const Node* from);
  void prepare_destinations(const Node& node);
  void deliver(TensorImpl& t, Node& node, size_t i, bool donatable, bool& donated);
  void deliver_converted(TensorImpl& t, Node& node, size_t i, bool rounds);
  void run_node(const std::shared_ptr<TensorImpl>& t);

  std::shared_ptr<TensorImpl> root_;
  // Gradient buffers this run handed to a second input by pass_through. A sum into one of them
  // (while still shared: more holders than the tensor and this function) goes to a new buffer.
  // Every other sum is in place, also when the user holds a handle to the gradient (as in
  // PyTorch) and when it is a view (a flattened parameter's gradient must stay in its slot).
  // Addresses of impls freed during the run may be reused by new ones; that can only send a
  // sum out of place needlessly, and never for a parameter (its gradient impl predates the run).
  std::unordered_set<const TensorImpl*> shared_;
  // The node being run: where each input's gradient is written, and whether that is the input's
  // own (first) gradient buffer.
  std::vector<Tensor> dest_;
  std::vector<bool> direct_;
  GradOutputs grads_;
};

void Engine::accumulate_into(TensorImpl& t, const Tensor& g, const Node* from) {
  if (!t.grad_valid) {
    t.grad = g.impl_ptr();
    t.grad_valid = true;
    return;
  }
  Tensor dst(t.grad);
  const GradientMath& math = gradient_math();
  if (t.grad.use_count() == 2 || shared_.count(t.grad.get()) == 0) {
    math.accumulate(dst, g);
    if (math.store && from) math.store(dst, t, *from);
  } else {
    Tensor sum = Tensor::empty(dst.shape(), dst.dtype(), dst.device());
    math.add(sum, dst, g);
    if (math.store && from) math.store(sum, t, *from);
    t.grad = sum.impl_ptr();
  }
}

void Engine::prepare_destinations(const Node& node) {
  const auto& inputs = node.inputs();
  const size_t n = inputs.size();
  dest_.assign(n, Tensor());
  direct_.assign(n, false);
  grads_.reset(n);
  for (size_t i = 0; i < n; ++i) {
    TensorImpl& in = *inputs[i];
    if (!in.requires_grad) continue;
    bool repeated = false;
    for (size_t j = 0; j < i; ++j) repeated |= inputs[j].get() == inputs[i].get();
    // First gradient of a tensor: write straight into its buffer (a parameter's buffer
    // survives zero_grad(), so a steady-state step allocates nothing here).
    if (!in.grad_valid && !repeated) {
      direct_[i] = true;
      // (A handle the user holds to the old gradient sees the new one, as after PyTorch's
      // zero_grad(set_to_none=False); a flattened parameter's view stays in its slot.)
      if (in.grad && same_layout(*in.grad, in) && shared_.count(in.grad.get()) == 0) {
        dest_[i] = Tensor(in.grad);
      } else {
        dest_[i] = Tensor::empty(in.shape, in.dtype, in.device);
      }
    } else {
      dest_[i] = Tensor::empty(in.shape, in.dtype, in.device);
    }
    grads_.set(i, &dest_[i]);
  }
}

// dy is in t's wider format (a float32 residual stream), or in another storage (a bf16 gradient
// reaching a float32 leaf through its cast): input i's gradient is dy converted to the input's
// storage and rounded to its format, in a buffer of its own.
void Engine::deliver_converted(TensorImpl& t, Node& node, size_t i, bool rounds) {
  TensorImpl& in = *node.inputs()[i];
  Tensor g = direct_[i] ? dest_[i] : Tensor::empty(in.shape, in.dtype, in.device);
  const GradientMath& math = gradient_math();
  if (math.convert) math.convert(g, Tensor(t.grad)); else g.copy_(Tensor(t.grad));
  if (rounds) math.store(g, in, node);
  if (direct_[i]) {
    in.grad = g.impl_ptr();
    in.grad_valid = true;
    dest_[i] = Tensor();
  } else {
    accumulate_into(in, g, &node);
  }
}

// Input i's gradient from node's output t. dy's buffer becomes the gradient of the inputs it
// passes through to, uncopied, when only they will hold it (donatable): t's own gradient is
// dropped after this node (not the root's, not a retained one) and no other tensor views the
// buffer. The first such input takes it; later ones share it only if they are intermediates whose
// gradient is read by their own node and then dropped (a leaf's gradient is the user's to modify,
// e.g. by clipping, in place); accumulate_into never writes a shared buffer in place. An input that
// keeps a gradient buffer of its own (a parameter's, e.g. a view into ParamList's flat buffer)
// gets a copy.
void Engine::deliver(TensorImpl& t, Node& node, size_t i, bool donatable, bool& donated) {
  TensorImpl& in = *node.inputs()[i];
  const bool rounds = g_gradient_math.store && narrower(in, t);
  if (grads_.passed_through(i) && (rounds || in.dtype != t.dtype)) return deliver_converted(t, node, i, rounds);
  if (grads_.passed_through(i)) {
    const bool share_ok = !in.grad && (!donated || (in.grad_fn != nullptr && !in.retain_grad));
    if (direct_[i] && donatable && share_ok) {
      if (donated) shared_.insert(t.grad.get());
      in.grad = t.grad;
      in.grad_valid = true;
      donated = true;
    } else if (direct_[i]) {
      dest_[i].copy_(Tensor(t.grad));
      in.grad = dest_[i].impl_ptr();
      in.grad_valid = true;
      dest_[i] = Tensor();  // the input holds it now; a later sum into it may be in place
    } else {
      accumulate_into(in, Tensor(t.grad), &node);
    }
    return;
  }
  if (direct_[i]) {
    in.grad = dest_[i].impl_ptr();
    in.grad_valid = true;
    dest_[i] = Tensor();  // the input holds it now; a later sum into it may be in place
  } else {
    accumulate_into(in, dest_[i], &node);
  }
}

void Engine::run_node(const std::shared_ptr<TensorImpl>& t) {
  Node& node = *t->grad_fn;
  if (!t->grad_valid) {  // no gradient reached this tensor
    node.release();
    return;
  }
  prepare_destinations(node);
  node.run_backward(Tensor(t->grad), grads_);
  const size_t n = node.inputs().size();
  if (const auto store = g_gradient_math.store)
    for (size_t i = 0; i < n; ++i)
      if (grads_[i] && !grads_.passed_through(i)) store(dest_[i], *node.inputs()[i], node);
  const bool donatable = !t->retain_grad && t != root_ && t->grad.use_count() == 1 && t->grad->storage.use_count() == 1;
  bool donated = false;
  for (size_t i = 0; i < n; ++i)
    if (grads_[i]) deliver(*t, node, i, donatable, donated);
  node.release();
  if (!t->retain_grad && t != root_) {
    t->grad.reset();
    t->grad_valid = false;
  }
}

void run_engine(const std::shared_ptr<TensorImpl>& root, const Tensor& seed) { Engine(root).run(seed); }

}  // namespace

void Tensor::backward() const {
  NL_CHECK(numel() == 1,
           "backward() needs a one-element tensor (a loss), got shape {}; pass the upstream "
           "gradient with backward(seed) for other shapes",
           shape_str(shape()));
  backward(Tensor::full_on(shape(), 1.0, dtype(), device()));
}

void Tensor::backward(const Tensor& seed) const {
  NL_CHECK(requires_grad(), "backward() on a tensor that does not require grad (no input had requires_grad_(true), or it was computed under NoGradGuard)");
  NL_CHECK(seed.shape() == shape() && seed.dtype() == dtype() && seed.device() == device(),
           "backward(seed): seed {} {} does not match the tensor {} {}", shape_str(seed.shape()),
           to_string(seed.dtype()), shape_str(shape()), to_string(dtype()));
  run_engine(impl_ptr(), seed);
}

}  // namespace normlab
