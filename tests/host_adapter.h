// A Backend that runs a device backend's kernels for host (cpu) tensors: each call uploads its
// inputs, gives every output a device buffer, runs the kernel on the device, and copies the
// outputs back into the caller's cpu tensors. Tensors read and written (C of an accumulating
// product, accumulate's dst, Adam's state) are uploaded, and an output that is also an input of
// the same call (out = a + b with out == a) shares one device buffer, as it would on the device.
// With `poison_outputs`, every output's device buffer is filled with NaN before the kernel runs,
// so that an element a kernel forgets to write is caught rather than read as a stale value.
//
// A test helper: the cross-backend Kernel* suites run their cpu-tensor bodies unchanged against
// "cuda" and "cuda-sim" through it. normlab itself never moves a kernel call's tensors like
// this: train, probe and gradcheck keep their tensors on the device. It names no concrete
// backend.
#pragma once
#include <memory>

#include "normlab/backend.h"

namespace normlab {

std::unique_ptr<Backend> make_host_adapter(Backend& device_backend, bool poison_outputs = false);

}  // namespace normlab
