// The table of op cases and grad forms (each op file adds its own), and how a case is found.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <mutex>

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

double OpCase::number(const std::string& name) const {
  for (const auto& [n, v] : numbers)
    if (n == name) return v;
  throw Error(fmt::format("op case {}: no number named '{}'", line(), name));
}

namespace detail {

Params& Params::add(const char* key, int64_t v) { return add(key, std::to_string(v).c_str()); }
Params& Params::add(const char* key, double v) { return add(key, fmt::format("{:g}", v).c_str()); }
Params& Params::add(const char* key, const char* v) {
  s_ += (s_.empty() ? "" : " ") + std::string(key) + "=" + v;
  return *this;
}

namespace {

// Large draws repeat: bench norms makes the cases of several norms at one shape, and each draws
// the same x and dy from the same seed. A draw of kCachedFrom values or more is kept (up to
// kCacheBytes in all, the oldest dropped first) with the generator's state before and after it,
// so that a repeat costs a copy instead of the generator (Box-Muller: ~25 ns a value); the values
// and the state after are the same either way.
constexpr int64_t kCachedFrom = int64_t{1} << 20;
constexpr int64_t kCacheBytes = int64_t{2} << 30;

struct CachedDraw {
  RngState before, after;
  Shape shape;
  double std, mean;
  Tensor values;
};

bool same_state(const RngState& a, const RngState& b) {
  return a.state == b.state && a.inc == b.inc && a.has_spare == b.has_spare && (!a.has_spare || a.spare == b.spare);
}

std::mutex draw_cache_mutex;
std::deque<CachedDraw>& draw_cache() {
  static std::deque<CachedDraw> cache;
  return cache;
}

}  // namespace

Tensor Draw::normal(const Shape& s, double std, double mean) {
  const int64_t n = shape_numel(s);
  const RngState before = rng.state();
  if (n >= kCachedFrom) {
    std::lock_guard<std::mutex> lock(draw_cache_mutex);
    for (const CachedDraw& c : draw_cache())
      if (same_state(c.before, before) && c.shape == s && c.std == std && c.mean == mean) {
        rng.set_state(c.after);
        return c.values.clone();
      }
  }
  Tensor t = Tensor::empty(s, DType::f64);
  double* v = t.data<double>();
  for (int64_t i = 0; i < n; ++i) v[i] = mean + std * rng.normal();
  if (n >= kCachedFrom && n * 8 <= kCacheBytes) {
    std::lock_guard<std::mutex> lock(draw_cache_mutex);
    std::deque<CachedDraw>& cache = draw_cache();
    int64_t bytes = n * 8;
    for (const CachedDraw& c : cache) bytes += c.values.numel() * 8;
    while (!cache.empty() && bytes > kCacheBytes) {
      bytes -= cache.front().values.numel() * 8;
      cache.pop_front();
    }
    cache.push_back({before, rng.state(), s, std, mean, t.clone()});
  }
  return t;
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

namespace {

const std::vector<detail::SizedMaker>& sized_makers() {
  static const std::vector<detail::SizedMaker> makers = [] {
    std::vector<detail::SizedMaker> m;
    detail::add_elementwise_makers(m);
    detail::add_norm_makers(m);
    detail::add_squash_makers(m);
    return m;
  }();
  return makers;
}

// A line's words after its op, as key=value pairs in order; well_formed false on a word without '='.
std::vector<std::pair<std::string, std::string>> line_words(const std::string& line, bool& well_formed) {
  std::vector<std::pair<std::string, std::string>> words;
  well_formed = true;
  size_t at = line.find(' ');
  while (at != std::string::npos && at < line.size()) {
    const size_t next = line.find(' ', at + 1);
    const std::string w = line.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    at = next;
    if (w.empty()) continue;
    const size_t eq = w.find('=');
    if (eq == std::string::npos || eq == 0) well_formed = false;
    else words.emplace_back(w.substr(0, eq), w.substr(eq + 1));
  }
  return words;
}

int64_t positive_word(const std::string& line, const std::string& key, const std::string& value, bool zero_ok) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  NL_USAGE(!value.empty() && *end == '\0' && errno == 0 && (v > 0 || (zero_ok && v == 0)) && v < (int64_t{1} << 40),
                 "op case '{}': {}={} is not a {} integer", shown(line), key, shown(value), zero_ok ? "non-negative" : "positive");
  return v;
}

// The product `line` names: m, n and k required (k may be 0: C is zero, or kept); batch 1, A and
// B batched (ab=1 bb=1), no transpose or accumulate, seed 0 unless given; the flags 0 or 1.
OpCase matmul_to_order(const std::string& line, const std::vector<std::pair<std::string, std::string>>& words) {
  MatmulSpec s;
  s.m = s.n = s.k = -1;
  int64_t seed = 0;
  const std::pair<const char*, bool*> flags[] = {{"ta", &s.trans_a},   {"tb", &s.trans_b},   {"ab", &s.a_batched},
                                                 {"bb", &s.b_batched}, {"acc", &s.accumulate}};
  for (const auto& word : words) {
    const std::string& k = word.first;  // not a structured binding: the lambda captures it
    const std::string& v = word.second;
    const auto flag = std::find_if(std::begin(flags), std::end(flags), [&](const auto& f) { return k == f.first; });
    if (flag != std::end(flags)) {
      NL_USAGE(v == "0" || v == "1", "op case '{}': {}={} is not 0 or 1", shown(line), k, shown(v));
      *flag->second = v == "1";
    } else if (k == "batch" || k == "m" || k == "n" || k == "k" || k == "seed") {
      const int64_t n = positive_word(line, k, v, k == "k" || k == "seed");
      (k == "batch" ? s.batch : k == "m" ? s.m : k == "n" ? s.n : k == "k" ? s.k : seed) = n;
    } else {
      throw UsageError(fmt::format("op case '{}': matmul cases have no word {} (they take batch, m, n, k, ta, tb, "
                                   "ab, bb, acc and seed)", shown(line), shown(k)));
    }
  }
  NL_USAGE(s.m > 0 && s.n > 0 && s.k >= 0, "op case '{}': give m=, n= and k= (e.g. 'matmul m=768 n=384 k=128 tb=1')",
           shown(line));
  // Each operand (A, B, C) at most 2^32 values, checked by division: the words go up to 2^40.
  constexpr int64_t kMaxValues = int64_t{1} << 32;
  const auto fits = [&](int64_t rows, int64_t cols) {
    return rows == 0 || cols == 0 || (cols <= kMaxValues / rows && s.batch <= kMaxValues / (rows * cols));
  };
  NL_USAGE(fits(s.m, s.k) && fits(s.k, s.n) && fits(s.m, s.n), "op case '{}': an operand has more than 2^32 values",
           shown(line));
  return detail::matmul_case_of(s, static_cast<uint64_t>(seed));
}

// The case `line` names, made by its op's maker: rows and d required, seed 0 unless given, and
// every other word the one the maker writes; a product of any shape (matmul_to_order). Null
// when the op has no maker.
const OpCase* made_to_order(const std::string& line) {
  static std::deque<OpCase> made;  // find_case's references stay valid
  const std::string op = line.substr(0, line.find(' '));
  if (op == "matmul") {
    bool well_formed = true;
    const auto words = line_words(line, well_formed);
    NL_USAGE(well_formed, "op case '{}': each word after the op is key=value", shown(line));
    made.push_back(matmul_to_order(line, words));
    return &made.back();
  }
  const auto m = std::find_if(sized_makers().begin(), sized_makers().end(), [&](const auto& s) { return s.op == op; });
  if (m == sized_makers().end()) return nullptr;
  bool well_formed = true;
  const auto words = line_words(line, well_formed);
  NL_USAGE(well_formed, "op case '{}': each word after the op is key=value", shown(line));
  int64_t rows = -1, d = -1, seed = 0;
  for (const auto& [k, v] : words) {
    if (k == "rows") rows = positive_word(line, k, v, false);
    if (k == "d") d = positive_word(line, k, v, false);
    if (k == "seed") seed = positive_word(line, k, v, true);
    if (k == "n") rows = 1, d = positive_word(line, k, v, false);  // the elementwise ops' n values
  }
  NL_USAGE(rows > 0 && d > 0, "op case '{}': give rows= and d= (e.g. '{} rows=4096 d=1024')", shown(line), op);
  NL_USAGE(d <= (int64_t{1} << 32) / rows, "op case '{}': rows x d is more than 2^32 values", shown(line));
  OpCase c = m->make(rows, d, static_cast<uint64_t>(seed));
  bool ok = true;
  const auto wrote = line_words(c.line(), ok);
  for (const auto& word : words) {
    const std::string& k = word.first;  // not a structured binding: a lambda captures it
    if (k == "rows" || k == "d" || k == "n" || k == "seed") continue;  // the maker's own arguments
    const auto w = std::find_if(wrote.begin(), wrote.end(), [&](const auto& kv) { return kv.first == k; });
    NL_USAGE(w != wrote.end() && w->second == word.second,
             "op case '{}': {} cases have no word {}={} (they are made as '{}')", shown(line), op, k,
             shown(word.second), c.line());
  }
  made.push_back(std::move(c));
  return &made.back();
}

}  // namespace

std::vector<std::string> sized_ops() {
  std::vector<std::string> ops;
  for (const auto& m : sized_makers()) ops.push_back(m.op);
  return ops;
}

const OpCase& find_case(const std::string& line) {
  for (const OpCase& c : all_cases())
    if (c.line() == line) return c;
  if (const OpCase* c = made_to_order(line)) return *c;
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
    if (p.find('=') != std::string::npos) {  // a line: the registry's, or one made to order
      const OpCase* c = &find_case(p);
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
      continue;
    }
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
  // Registry order, whatever the order of the patterns; cases made to order after them, in the
  // order given.
  const std::vector<OpCase>& table = all_cases();
  auto rank = [&](const OpCase* c) {
    const bool in_table = !table.empty() && c >= &table.front() && c <= &table.back();
    return in_table ? c - &table.front() : static_cast<std::ptrdiff_t>(table.size());
  };
  std::stable_sort(out.begin(), out.end(), [&](const OpCase* a, const OpCase* b) { return rank(a) < rank(b); });
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
