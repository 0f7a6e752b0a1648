// nn knowing sweeps and configs
#include "normlab/config.h"
