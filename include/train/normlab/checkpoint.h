// Checkpoints in the safetensors format, so that PyTorch loads them as they are
// (safetensors.torch.load_file): an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__":
// {string: string}}, then the raw little-endian data, tensors back to back in header order.
// Parameter names are PyTorch's (blocks.3.norm1.weight, blocks.3.mlp.fc1.bias, head.weight).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "normlab/nn.h"
#include "normlab/tensor.h"
#include "normlab/train.h"
#include "normlab/train_model.h"

namespace normlab {

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order, on the cpu
};

// Written atomically (a temporary name, then rename); every write checked. f32, f64, i32 tensors.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata);
// Reads and validates the whole file: a header length past the file's end or absurdly large, a
// header that is not a JSON object of entries, an unknown dtype, a negative or overflowing shape,
// data offsets out of bounds, overlapping, leaving gaps or not matching the shape, a duplicate name:
// each a UsageError naming the file and the problem. Never reads outside the file.
SafetensorsFile load_safetensors(const std::string& path);

// A model parameter's name in PyTorch's convention: "blocks.3.norm1.gamma" -> "blocks.3.norm1.weight",
// ".beta"/".b" -> ".bias", ".w" -> ".weight", "tok_emb" -> "tok_emb.weight".
std::string torch_parameter_name(const std::string& normlab_name);
// The model's parameters under their PyTorch names, in creation order.
std::vector<std::pair<std::string, Tensor>> model_state(const ParamList& params);
inline std::vector<std::pair<std::string, Tensor>> model_state(Model& model) { return model_state(model.params()); }
inline std::vector<std::pair<std::string, Tensor>> model_state(TrainModel& model) { return model_state(model.params()); }
// Copies a checkpoint's tensors into the parameters of the model `cfg` describes: every parameter
// must be present with its shape, and the checkpoint may hold nothing else; every mismatch is
// named (UsageError).
void load_model_state(ParamList& params, const ModelConfig& cfg, const SafetensorsFile& file, const std::string& source);
inline void load_model_state(Model& model, const SafetensorsFile& file, const std::string& source) {
  load_model_state(model.params(), model.config(), file, source);
}
inline void load_model_state(TrainModel& model, const SafetensorsFile& file, const std::string& source) {
  load_model_state(model.params(), model.config(), file, source);
}

// The loop's state beside a checkpoint (checkpoints/step-N.state.safetensors): the Adam moments
// as two flat F32 tensors "adam.m" and "adam.v", the rest in __metadata__ with every double
// written exactly (hexadecimal floating point), so that a resumed run is bit-for-bit the one that
// never stopped. `extra` adds metadata entries (the run's save_every).
void save_train_state(const std::string& path, const TrainState& state,
                      const std::map<std::string, std::string>& extra = {});
// Reads and validates one (every field present and parseable, the moments of equal length);
// a UsageError naming the file and the problem otherwise. `extra` receives the metadata entries.
TrainState load_train_state(const std::string& path, std::map<std::string, std::string>* extra = nullptr);

}  // namespace normlab
