// core knowing nn
#include "normlab/nn.h"
