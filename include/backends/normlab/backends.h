// The one place that names the concrete backends: registers "reference", "cpu" (and "cuda" when
// built) in the backend table and gives the tape its gradient arithmetic. Programs (the cli, the
// test runners) call it once before any op.
#pragma once

namespace normlab {

void install_backends();

}  // namespace normlab
