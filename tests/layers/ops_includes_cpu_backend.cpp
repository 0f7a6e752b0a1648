// ops naming a concrete backend
#include "normlab/cpu_backend.h"
