// The one place that names the concrete backends: registers "reference", "cpu" (and "cuda" when
// built) in the backend table and gives the tape its gradient arithmetic. Programs (the cli, the
// test runners) call it once before any op.
#pragma once

namespace normlab {

void install_backends();
// Throws UsageError naming the variable when the environment that steers the backends has a bad
// value (NORMLAB_TUNE, NORMLAB_NORM_VARIANT, NORMLAB_STREAMING_STORES): the CLI calls it before
// a command does anything, so a typo is one line and exit 2, not a failure halfway through.
void check_backend_environment();

}  // namespace normlab
