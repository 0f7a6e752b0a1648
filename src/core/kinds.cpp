#include "normlab/kinds.h"

namespace normlab {

template <>
const EnumNames& enum_names<NormKind>() {
  static const EnumNames t{
      "norm",
      {{NormKind::none, "none", {}, "no normalization"},
       {NormKind::layernorm, "layernorm", {"ln"}, "LayerNorm: centred, scaled, gain and bias"},
       {NormKind::rmsnorm, "rmsnorm", {"rms"}, "RMSNorm: scaled by the root mean square, gain only"}}};
  return t;
}
template <>
const EnumNames& enum_names<Placement>() {
  static const EnumNames t{"placement",
                           {{Placement::pre, "pre", {}, "x + F(N(x))"},
                            {Placement::post, "post", {}, "N(x + F(x))"},
                            {Placement::sandwich, "sandwich", {}, "x + N2(F(N1(x)))"},
                            {Placement::deepnorm, "deepnorm", {}, "N(alpha x + F(x)), DeepNet's alpha and init"}}};
  return t;
}

double default_eps(NormKind kind) {
  switch (kind) {
    case NormKind::layernorm: return 1e-5;
    case NormKind::rmsnorm: return 1e-6;
    case NormKind::none: break;
  }
  return 0;
}

}  // namespace normlab
