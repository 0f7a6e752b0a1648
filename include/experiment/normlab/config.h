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

// Applies a JSON object's keys (unknown key: UsageError naming it and the closest known key).
void apply_config_json(TrainConfig& cfg, const std::string& json_text, const std::string& source);
// Applies one key given as text (a flag): numbers and booleans are parsed by the key's type.
void apply_config_value(TrainConfig& cfg, const std::string& key, const std::string& value);
// The config a command runs: defaults, then the JSON file (if any), then --key value flags;
// byte-level text data gets vocab 256 unless a vocab was given. Throws UsageError.
TrainConfig load_train_config(const std::string& config_file, const std::map<std::string, std::string>& flags);
// Fully resolved config as pretty JSON.
std::string config_to_json(const TrainConfig& cfg);
// The closest known key by edit distance (empty when nothing is close).
std::string closest_config_key(const std::string& name);

}  // namespace normlab
