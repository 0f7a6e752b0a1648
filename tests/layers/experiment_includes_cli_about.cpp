// experiment asking the backends' versions itself
#include "normlab/about.h"
