// The table of op cases and grad forms (each op file adds its own), and how a case is found.
#include <algorithm>
#include <cstdio>

#include "cases_internal.h"
#include "normlab/error.h"

namespace normlab::opcases {

// ---- Tensors -------------------------------------------------------------------------------

void Tensors::set(const std::string& name, Tensor t) {
  for (auto& [n, have] : items_)
    if (n == name) {
      have = std::move(t);
      return;
    }
  items_.emplace_back(name, std::move(t));
}

bool Tensors::has(const std::string& name) const {
  return std::any_of(items_.begin(), items_.end(), [&](const auto& i) { return i.first == name; });
}

const Tensor& Tensors::at(const std::string& name) const {
  for (const auto& [n, t] : items_)
    if (n == name) return t;
  throw Error(fmt::format("op case: no tensor named '{}'", name));
}
Tensor& Tensors::at(const std::string& name) { return const_cast<Tensor&>(std::as_const(*this).at(name)); }

Tensor Tensors::get(const std::string& name) const { return has(name) ? at(name) : Tensor(); }

Tensor* Tensors::out(const std::string& name) {
  for (auto& [n, t] : items_)
    if (n == name) return t.defined() ? &t : nullptr;
  return nullptr;
}

void Tensors::erase(const std::string& name) {
  items_.erase(std::remove_if(items_.begin(), items_.end(), [&](const auto& i) { return i.first == name; }),
               items_.end());
}

namespace detail {

Params& Params::add(const char* key, int64_t v) { return add(key, std::to_string(v).c_str()); }
Params& Params::add(const char* key, double v) { return add(key, fmt::format("{:g}", v).c_str()); }
Params& Params::add(const char* key, const char* v) {
  s_ += (s_.empty() ? "" : " ") + std::string(key) + "=" + v;
  return *this;
}

Tensor Draw::normal(const Shape& s, double std, double mean) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (double& x : v) x = mean + std * rng.normal();
  return Tensor::from(v, s, DType::f64);
}

Tensor Draw::ids(const Shape& s, int64_t bound) {
  std::vector<int32_t> v(static_cast<size_t>(shape_numel(s)));
  for (int32_t& x : v) x = static_cast<int32_t>(rng.below(static_cast<uint32_t>(bound)));
  return Tensor::from_ids(v, s);
}

Tensors only(const Tensors& from, const std::vector<std::string>& names) {
  Tensors t;
  for (const std::string& n : names) t.set(n, from.at(n));
  return t;
}

std::vector<std::pair<std::string, Tensor>> leaves(const Tensors& drawn, const std::vector<std::string>& names,
                                                   DType dtype) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& n : names) out.emplace_back(n, drawn.at(n).to(dtype).requires_grad_(true));
  return out;
}

}  // namespace detail

// ---- the table -----------------------------------------------------------------------------

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> c;
    detail::add_matmul_cases(c);
    detail::add_elementwise_cases(c);
    detail::add_format_cases(c);
    detail::add_norm_cases(c);
    detail::add_squash_cases(c);
    detail::add_softmax_cases(c);
    detail::add_attention_cases(c);
    detail::add_token_cases(c);
    detail::add_layout_cases(c);
    return c;
  }();
  return cases;
}

const std::vector<GradForm>& grad_forms() {
  static const std::vector<GradForm> forms = [] {
    // In the order gradcheck lists them (gradcheck --list).
    std::vector<GradForm> f;
    detail::add_matmul_grad_forms(f);
    detail::add_elementwise_grad_forms(f);
    detail::add_norm_grad_forms(f);
    detail::add_squash_grad_forms(f);
    detail::add_constant_grad_form(f);
    detail::add_softmax_grad_forms(f);
    detail::add_attention_grad_forms(f);
    detail::add_token_grad_forms(f);
    detail::add_layout_grad_forms(f);
    return f;
  }();
  return forms;
}

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const OpCase& c : all_cases())
    if (std::find(names.begin(), names.end(), c.op) == names.end()) names.push_back(c.op);
  return names;
}

const OpCase& find_case(const std::string& line) {
  for (const OpCase& c : all_cases())
    if (c.line() == line) return c;
  const std::string op = line.substr(0, line.find(' '));
  std::string near;
  int shown_cases = 0;
  for (const OpCase& c : all_cases())
    if (c.op == op && shown_cases++ < 3) near += (near.empty() ? "" : "; ") + c.line();
  throw UsageError(fmt::format("no op case '{}'{}", shown(line),
                               near.empty() ? " (its op is none of the registry's)" : " (cases of " + op + ": " + near + "; ...)"));
}

std::vector<const OpCase*> select_cases(const std::vector<std::string>& patterns) {
  std::vector<const OpCase*> out;
  for (const std::string& p : patterns) {
    bool matched = false;
    for (const OpCase& c : all_cases()) {
      const bool family = c.op.compare(0, p.size(), p) == 0 && c.op.size() > p.size() && c.op[p.size()] == '_';
      if (p == "all" || p == c.op || family || p == c.line()) {
        if (std::find(out.begin(), out.end(), &c) == out.end()) out.push_back(&c);
        matched = true;
      }
    }
    if (!matched) {
      std::string ops;
      for (const std::string& o : op_names()) ops += (ops.empty() ? "" : ", ") + o;
      throw UsageError(fmt::format("'{}' selects no op case (all, an op: {}; a family such as rmsnorm; or a case's line)",
                                   shown(p), ops));
    }
  }
  // Registry order, whatever the order of the patterns.
  std::sort(out.begin(), out.end());
  return out;
}

int64_t case_bytes(const OpCase& c, DType dtype) {
  int64_t elements = 0, ids = 0;
  const Tensors inputs = c.inputs();
  for (const auto& [name, t] : inputs.items()) (t.dtype() == DType::i32 ? ids : elements) += t.numel();
  for (const Output& o : c.outputs) elements += shape_numel(o.shape);
  return elements * static_cast<int64_t>(dtype_size(dtype)) + 4 * ids;
}

}  // namespace normlab::opcases
