// Shared by the probe implementation files (src/train/probe*.cpp); not a public header.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "normlab/probe.h"

namespace normlab {

// The encoder-decoder's Fig. 3 probe (probe_encdec.cpp) as the report's text section and JSON.
std::string xiong_encdec_text(const XiongEncDecResult& r, const ProbeOptions& opt);
nlohmann::json xiong_encdec_json(const XiongEncDecResult& r);

}  // namespace normlab
