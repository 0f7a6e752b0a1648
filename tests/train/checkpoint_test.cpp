// Checkpoints: safetensors written and read back bit for bit, PyTorch parameter names, a model
// restored from its checkpoint computes the same loss, and a catalogue of corrupted files is
// rejected with one clear error (never a crash or a read outside the file).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "normlab/autograd.h"
#include "normlab/checkpoint.h"
#include "normlab/error.h"
#include "normlab/train.h"
#include "test_util.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A file of the given header text and data bytes.
fs::path write_raw(const std::string& name, const std::string& header, const std::string& data,
                   uint64_t claimed_len = UINT64_MAX) {
  fs::path p = fs::path(testing::TempDir()) / name;
  std::ofstream(p, std::ios::binary) << le64(claimed_len == UINT64_MAX ? header.size() : claimed_len) << header << data;
  return p;
}

ModelConfig small_model() {
  ModelConfig c;
  c.model = ModelKind::gpt;
  c.layers = 2;
  c.d_model = 16;
  c.d_hidden = 24;
  c.heads = 2;
  c.qk_norm = true;
  return c;
}

}  // namespace

TEST(Checkpoint, PyTorchNames) {
  EXPECT_EQ(torch_parameter_name("blocks.3.norm1.gamma"), "blocks.3.norm1.weight");
  EXPECT_EQ(torch_parameter_name("blocks.3.norm1.beta"), "blocks.3.norm1.bias");
  EXPECT_EQ(torch_parameter_name("blocks.3.mlp.fc1.b"), "blocks.3.mlp.fc1.bias");
  EXPECT_EQ(torch_parameter_name("blocks.0.attn.q.w"), "blocks.0.attn.q.weight");
  EXPECT_EQ(torch_parameter_name("tok_emb"), "tok_emb.weight");
  EXPECT_EQ(torch_parameter_name("head.w"), "head.weight");
}

TEST(Checkpoint, RoundTripIsBitExactAndRestoresTheLoss) {
  const fs::path path = fs::path(testing::TempDir()) / "normlab_ck_roundtrip.safetensors";
  Model a(small_model(), 1);
  save_safetensors(path.string(), model_state(a), {{"normlab_config", "{}"}});
  SafetensorsFile f = load_safetensors(path.string());
  EXPECT_EQ(f.metadata.at("normlab_config"), "{}");
  ASSERT_EQ(f.tensors.size(), a.params().all().size());
  Model b(small_model(), 2);  // other weights
  load_model_state(b, f, path.string());
  for (size_t i = 0; i < a.params().all().size(); ++i)
    EXPECT_EQ(a.params().all()[i].to_vector(), b.params().all()[i].to_vector()) << a.params().all()[i].name();
  std::vector<int32_t> ids(2 * 8), targets(2 * 8);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int32_t((7 * i) % 64);
    targets[i] = int32_t((3 * i + 1) % 64);
  }
  NoGradGuard no_grad;
  const double la = a.loss(Tensor::from_ids(ids, {2, 8}), Tensor::from_ids(targets, {2, 8})).item();
  const double lb = b.loss(Tensor::from_ids(ids, {2, 8}), Tensor::from_ids(targets, {2, 8})).item();
  EXPECT_EQ(la, lb);
}

TEST(Checkpoint, MismatchedModelIsNamed) {
  const fs::path path = fs::path(testing::TempDir()) / "normlab_ck_mismatch.safetensors";
  Model a(small_model(), 1);
  save_safetensors(path.string(), model_state(a), {});
  ModelConfig wider = small_model();
  wider.d_model = 32;
  Model b(wider, 1);
  try {
    load_model_state(b, load_safetensors(path.string()), path.string());
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("tok_emb.weight is float32 (64, 16) in the checkpoint"), std::string::npos)
        << e.what();
  }
  ModelConfig no_qk = small_model();
  no_qk.qk_norm = false;
  Model c(no_qk, 1);
  try {
    load_model_state(c, load_safetensors(path.string()), path.string());
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("q_norm.weight is not a parameter of this model"), std::string::npos)
        << e.what();
  }
}

TEST(Checkpoint, CorruptedFilesAreRejectedCleanly) {
  const std::string ok_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data8(8, '\1');
  struct Case {
    std::string name;
    fs::path path;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"too short", [] {
         fs::path p = fs::path(testing::TempDir()) / "ck_short";
         std::ofstream(p, std::ios::binary) << "abc";
         return p;
       }(), "8-byte header length"},
      {"empty header", write_raw("ck_empty", "", "", 0), "not JSON"},
      {"header past the end", write_raw("ck_past", "{" + ok_entry + "}", data8, 1u << 20), "runs past the end"},
      {"absurd header length", write_raw("ck_huge", "{}", "", uint64_t{1} << 62), "not plausible"},
      {"not JSON", write_raw("ck_nojson", "{\"t\": [1, 2", data8), "not JSON"},
      {"not an object", write_raw("ck_array", "[1, 2]", data8), "not a JSON object"},
      {"unknown dtype", write_raw("ck_dtype", R"({"t":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "ab"),
       "F8_E4M3"},
      {"offset out of bounds", write_raw("ck_oob", R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"),
       "outside the 4 data bytes"},
      {"offsets not the shape", write_raw("ck_size", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8),
       "needs 12"},
      {"negative shape", write_raw("ck_neg", R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8),
       "not a size"},
      {"duplicate name", write_raw("ck_dup", "{" + ok_entry + "," + ok_entry + "}", data8), "appears twice"},
      {"trailing bytes", write_raw("ck_trail", "{" + ok_entry + "}", data8 + "xx"), "trailing"},
      {"gap", write_raw("ck_gap", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8), "gap or overlap"},
      {"metadata not strings", write_raw("ck_meta", R"({"__metadata__":{"a":1}})", ""), "not a string"},
      // The system's reason, and what is not a regular file refused at once (a FIFO would block
      // this call forever: the test would time out)
      {"missing file", fs::path(testing::TempDir()) / "ck_nothing_here", "No such file or directory"},
      {"a directory", fs::path(testing::TempDir()), "it is a directory"},
      {"/dev/zero", fs::path("/dev/zero"), "not a regular file"},
      {"a FIFO", [] {
         fs::path p = fs::path(testing::TempDir()) / "ck_fifo";
         fs::remove(p);
         ::mkfifo(p.c_str(), 0600);
         return p;
       }(), "not a regular file"},
  };
  for (const Case& c : cases) {
    try {
      load_safetensors(c.path.string());
      ADD_FAILURE() << c.name << ": no error";
    } catch (const UsageError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << c.name;
    }
  }
}
