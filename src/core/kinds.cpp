#include "normlab/kinds.h"

namespace normlab {

template <>
const EnumNames& enum_names<NormKind>() {
  static const EnumNames t{
      "norm",
      {{NormKind::none, "none", {}, "no normalization"},
       {NormKind::layernorm, "layernorm", {"ln"}, "LayerNorm: centred, scaled, gain and bias"},
       {NormKind::rmsnorm, "rmsnorm", {"rms"}, "RMSNorm: scaled by the root mean square, gain only"},
       {NormKind::dyt, "dyt", {}, "DyT (Zhu et al. 2025): gamma * tanh(alpha x) + beta, alpha a learned scalar"},
       {NormKind::derf, "derf", {}, "Derf (2025): gamma * erf(alpha x + s) + beta, alpha and s learned scalars"},
       {NormKind::seednorm, "seednorm", {"seed"},
        "SeeDNorm (Cai et al. 2025): (gamma + alpha tanh(x . beta)) x / RMS(x), gamma, alpha, beta learned vectors"}}};
  return t;
}
template <>
const EnumNames& enum_names<Placement>() {
  static const EnumNames t{"placement",
                           {{Placement::pre, "pre", {}, "x + F(N(x))"},
                            {Placement::post, "post", {}, "N(x + F(x))"},
                            {Placement::sandwich, "sandwich", {"peri"}, "x + N2(F(N1(x))) (Peri-LN, Kim et al. 2025)"},
                            {Placement::deepnorm, "deepnorm", {}, "N(alpha x + F(x)), DeepNet's alpha and init"},
                            {Placement::postsub, "postsub", {"olmo2"}, "x + N(F(x)), the norm on the sublayer output (OLMo 2)"},
                            {Placement::mixln, "mixln", {}, "Mix-LN: post in the first mix_post_layers blocks, pre after"}}};
  return t;
}

double default_eps(NormKind kind) {
  switch (kind) {
    case NormKind::layernorm: return 1e-5;
    case NormKind::rmsnorm:
    case NormKind::seednorm: return 1e-6;
    case NormKind::none:
    case NormKind::dyt:
    case NormKind::derf: break;
  }
  return 0;
}

bool has_eps(NormKind kind) {
  return kind == NormKind::layernorm || kind == NormKind::rmsnorm || kind == NormKind::seednorm;
}

}  // namespace normlab
