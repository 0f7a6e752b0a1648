// The train config schema: one table of keys, read from JSON files and from --key value flags,
// validated, and written back fully resolved (defaults included).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "normlab/train.h"

namespace normlab {

struct ConfigKey {
  std::string name, type, help;  // type: int, float, string, bool
};
const std::vector<ConfigKey>& config_keys();

// Checks JSON text as a config file is checked: valid JSON (no NUL byte, numbers within a double's
// range: 1e400 is refused), nested at most 16 deep, no key twice in one object. Throws UsageError
// naming `source`.
void check_json_text(const std::string& text, const std::string& source);
// Applies a JSON object's keys (unknown key: UsageError naming it and the closest known key).
void apply_config_json(TrainConfig& cfg, const std::string& json_text, const std::string& source);
// Applies one key given as text (a flag): numbers and booleans are parsed by the key's type.
void apply_config_value(TrainConfig& cfg, const std::string& key, const std::string& value);
// The config a command runs: defaults, then the JSON file (if any), then --key value flags;
// byte-level text data gets vocab 256 unless a vocab was given. Throws UsageError.
TrainConfig load_train_config(const std::string& config_file, const std::map<std::string, std::string>& flags);
// TrainConfig::validate() and the limits on top of it: every size bounded (no product of sizes
// can overflow, nothing is narrowed), threads <= kMaxThreads, and the resolved config reads back
// (config_to_json, then --config) as the same config. Throws UsageError naming the key.
void validate_config(const TrainConfig& cfg);
// Roughly the bytes a training step of cfg holds at its peak with `batch` sequences: parameters,
// their gradients and Adam's two moments, the activations the tape keeps and their gradients
// (attention scores included for gpt), the logits; plus `data_bytes` of loaded data.
double estimate_memory_bytes(const TrainConfig& cfg, int64_t batch, double data_bytes = 0);
// UsageError, with the estimate and the machine's memory, when the estimate is over the memory
// budget (system.h). `what` names the command ("train", "probe").
void check_fits_in_memory(const TrainConfig& cfg, int64_t batch, const std::string& what, double data_bytes = 0);
// Fully resolved config as pretty JSON.
std::string config_to_json(const TrainConfig& cfg);
// The closest known key by edit distance (empty when nothing is close).
std::string closest_config_key(const std::string& name);

}  // namespace normlab
