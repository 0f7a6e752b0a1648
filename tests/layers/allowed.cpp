// ops sees its own headers, the backend interface, the tape and core.
#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/ops.h"
#include "normlab/tensor.h"
