// handcalc JSON output: every intermediate of a worksheet under stable keys (documented in
// docs/handcalc.md), unrounded, so another program can check the arithmetic. Serializes only.
#include <nlohmann/json.hpp>

#include "normlab/handcalc.h"

namespace normlab::handcalc {

namespace {

using nlohmann::json;

json layernorm_json(const LayerNormWorksheet& ws) {
  return json{{"norm", to_string(NormKind::layernorm)}, {"mean", ws.mean},         {"xc", ws.xc},
              {"xc_sq", ws.xc_sq},     {"var", ws.var},           {"std", ws.std_dev},
              {"std_eps", ws.std_eps}, {"rstd", ws.rstd},         {"xhat", ws.xhat},
              {"y", ws.y},             {"out_mean", ws.out_mean}, {"out_std", ws.out_std},
              {"xhat_norm", ws.xhat_norm}, {"reductions", ws.reductions}, {"params", ws.params}};
}

json rmsnorm_json(const RMSNormWorksheet& ws) {
  return json{{"norm", to_string(NormKind::rmsnorm)}, {"x_sq", ws.x_sq},         {"mean_sq", ws.mean_sq},
              {"rms", ws.rms},          {"r", ws.r},               {"inv_r", ws.inv_r},
              {"xhat", ws.xhat},        {"y", ws.y},               {"out_mean", ws.out_mean},
              {"out_std", ws.out_std},  {"out_rms", ws.out_rms},   {"xhat_norm", ws.xhat_norm},
              {"reductions", ws.reductions}, {"params", ws.params}};
}

json norm_step_json(const NormStep& step) {
  return step.layernorm ? layernorm_json(*step.layernorm) : rmsnorm_json(*step.rmsnorm);
}

json head(const char* form, int decimals) {
  return json{{"command", "handcalc"}, {"form", form}, {"decimals", decimals}};
}

}  // namespace

std::string render_json(const NormWorksheet& ws, int decimals) {
  json j = head("norm", decimals);
  const auto& x = ws.layernorm ? ws.layernorm->x : ws.rmsnorm->x;
  json input{{"x", x},
             {"d", x.size()},
             {"eps", ws.layernorm ? ws.layernorm->eps : ws.rmsnorm->eps},
             {"norm", norm_name(ws.norm)},
             {"gamma", ws.layernorm ? ws.layernorm->gamma : ws.rmsnorm->gamma},
             {"gamma_default", ws.gamma_default}};
  if (ws.layernorm) {
    input["beta"] = ws.layernorm->beta;
    input["beta_default"] = ws.beta_default;
  }
  j["input"] = std::move(input);
  if (ws.layernorm) j[to_string(NormKind::layernorm)] = layernorm_json(*ws.layernorm);
  if (ws.rmsnorm) j[to_string(NormKind::rmsnorm)] = rmsnorm_json(*ws.rmsnorm);
  return j.dump();
}

std::string render_json(const ResidualWorksheet& ws, int decimals) {
  json j = head("residual", decimals);
  j["input"] = json{{"x", ws.x},   {"d", ws.d},
                    {"w", ws.w},   {"w_default", ws.w_default},
                    {"dy", ws.dy}, {"dy_default", ws.dy_default}};
  j["w_bound"] = ws.w_bound;
  j["forward"] = json{{"fx", ws.fx}, {"y", ws.y}};
  j["backward"] = json{{"identity", ws.grad_identity},
                       {"f_term", ws.grad_f},
                       {"dx", ws.dx},
                       {"no_residual", ws.dx_no_residual},
                       {"norm_identity", ws.norm_identity},
                       {"norm_f_term", ws.norm_f},
                       {"norm_dx", ws.norm_dx},
                       {"norm_no_residual", ws.norm_no_residual},
                       {"identity_share", ws.identity_share}};
  return j.dump();
}

std::string render_json(const PlacementWorksheet& ws, int decimals) {
  json j = head("placement", decimals);
  json input{{"x", ws.x},
             {"d", ws.d},
             {"w", ws.w},
             {"w_default", ws.w_default},
             {"norm", norm_name(ws.norm)},
             {"eps", ws.eps},
             {"gamma", ws.gamma},
             {"gamma_default", ws.gamma_default}};
  if (ws.norm == NormKind::layernorm) {
    input["beta"] = ws.beta;
    input["beta_default"] = ws.beta_default;
  }
  j["input"] = std::move(input);
  j["x_norm"] = ws.x_norm;
  j["sqrt_d"] = ws.sqrt_d;
  j["pre"] = json{{"n", norm_step_json(ws.pre_n)},
                  {"f", ws.pre_f},
                  {"y", ws.pre_y},
                  {"y_norm", ws.pre_y_norm}};
  j["post"] = json{{"f", ws.post_f},
                   {"s", ws.post_s},
                   {"n", norm_step_json(ws.post_n)},
                   {"y", ws.post_y},
                   {"y_norm", ws.post_y_norm}};
  return j.dump();
}

}  // namespace normlab::handcalc
