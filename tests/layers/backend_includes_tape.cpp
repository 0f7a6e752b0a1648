// a backend including the tape
#include "normlab/autograd.h"
