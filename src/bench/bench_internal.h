// `bench`: helpers shared by the files of src/bench (not part of the public header).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace normlab::bench {
struct NormReport;
struct StepReport;
struct CompareRow;

// bench_json.cpp: the JSON documents (render(..., Format::json) returns these).
std::string norm_report_json(const NormReport& r);
std::string step_report_json(const StepReport& r);
std::string compare_json(const std::vector<CompareRow>& rows);
}  // namespace normlab::bench

namespace normlab::bench::detail {

// copy_kernels.cpp: the bandwidth baselines; n floats, split over the OpenMP threads.
void copy_loop(float* dst, const float* src, int64_t n);
void copy_memcpy(float* dst, const float* src, int64_t n);
// s = alpha*a + b: the add of the unfused add+norm baseline.
void add_scaled(float* s, const float* a, const float* b, float alpha, int64_t n);

// Runs argv[0] (searched in PATH) with argv, no shell; stdout and stderr go to the files named
// (empty: /dev/null). Returns the exit status, 127 when it cannot be started, 128+N on signal N.
int run_process(const std::vector<std::string>& argv, const std::string& stdout_path,
                const std::string& stderr_path);

// Working sets below this are labelled cache-resident: max(1 GiB, 4 x the last-level cache).
int64_t cache_resident_below(int64_t llc_bytes);

}  // namespace normlab::bench::detail
