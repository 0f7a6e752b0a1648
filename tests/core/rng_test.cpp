// The RNG's streams are part of every result's reproducibility: the 64-bit draw is the first
// 32-bit draw in its high half, whatever the compiler (the order is written out, not left to
// the evaluation order of an expression).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "normlab/rng.h"

using normlab::Rng;

TEST(Rng, U64IsTwoU32DrawsHighFirst) {
  Rng a(42, 7), b(42, 7);
  for (int i = 0; i < 100; ++i) {
    const uint64_t high = b.next_u32();
    const uint64_t low = b.next_u32();
    EXPECT_EQ(a.next_u64(), (high << 32) | low) << i;
  }
}

TEST(Rng, StreamsDiffer) {
  Rng a(1, normlab::stream::init), b(1, normlab::stream::data);
  int same = 0;
  for (int i = 0; i < 64; ++i) same += a.next_u32() == b.next_u32();
  EXPECT_LT(same, 2);
}

// Known answers: tests/data/pcg32_kat.json was computed by an independent transcription of the
// PCG reference (tests/data/pcg32_kat_gen.py), not by normlab; scripts/normlab_mirror.py's Rng
// checks the same file (its --self-test, ctest Scripts.NormlabMirrorPcg32).
TEST(Rng, Pcg32KnownAnswers) {
  const std::string path = std::string(NORMLAB_SOURCE_DIR) + "/tests/data/pcg32_kat.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  const auto kat = nlohmann::json::parse(in);
  const double normal_tol = kat.at("normal_tolerance").get<double>();
  ASSERT_GE(kat.at("cases").size(), 4u);
  for (const auto& c : kat.at("cases")) {
    const auto seed = c.at("seed").get<uint64_t>();
    const auto stream = c.at("stream").get<uint64_t>();
    const std::string where = "Rng(" + std::to_string(seed) + ", " + std::to_string(stream) + ")";
    Rng u32(seed, stream), uni(seed, stream), below(seed, stream), normal(seed, stream);
    for (const auto& want : c.at("u32")) EXPECT_EQ(u32.next_u32(), want.get<uint32_t>()) << where;
    for (const auto& want : c.at("uniform")) EXPECT_EQ(uni.uniform(), want.get<double>()) << where;
    for (const auto& want : c.at("below_10")) EXPECT_EQ(below.below(10), want.get<uint32_t>()) << where;
    for (const auto& want : c.at("normal")) EXPECT_NEAR(normal.normal(), want.get<double>(), normal_tol) << where;
  }
}
