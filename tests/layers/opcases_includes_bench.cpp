// the op cases knowing the bench that reads them
#include "normlab/bench.h"
