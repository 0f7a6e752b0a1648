// one backend including another
#include "normlab/reference_kernels.h"
