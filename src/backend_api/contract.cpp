// The checks a kernel's contract is made of (kernel.h): each kernel states its own, once, in the
// header that declares it, and run_kernel holds every call to it before the backend's
// implementation runs. A tensor that fails names the backend, the kernel and the argument.
#include <fmt/format.h>

#include "normlab/error.h"
#include "normlab/kernel.h"

namespace normlab {

const Contract& Contract::need(const Tensor& t, const char* arg, int64_t numel) const {
  NL_CHECK(t.defined(), "{} {}: {} is an undefined tensor", b_.name(), kernel_, arg);
  NL_CHECK(t.device() == b_.device(), "{} {}: {} is on {}, the backend's device is {}", b_.name(), kernel_, arg,
           device_name(t.device()), device_name(b_.device()));
  NL_CHECK(t.numel() == numel, "{} {}: {} has shape {} ({} elements); the sizes imply {}", b_.name(), kernel_, arg,
           shape_str(t.shape()), t.numel(), numel);
  return *this;
}

const Contract& Contract::maybe(const Tensor& t, const char* arg, int64_t numel) const {
  return t.defined() ? need(t, arg, numel) : *this;
}

const Contract& Contract::maybe(const Tensor* t, const char* arg, int64_t numel) const {
  return t ? need(*t, arg, numel) : *this;
}

void Contract::fail(const std::string& what) const {
  detail::check_failed(__FILE__, __LINE__, fmt::format("{} {}: {}", b_.name(), kernel_, what));
}

}  // namespace normlab
