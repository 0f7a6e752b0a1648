// libFuzzer target: the sbatch writer's inputs (--out, the normlab path, --slurm-partition,
// --slurm-time, --rerun and the numbers). Property: an accepted input yields a script in which no
// value starts a new line or a new #SBATCH directive: every #SBATCH line is one of ours and reads
// back, by both of Slurm's directive parsers (old: only "..." quotes; new: '...' too), as exactly
// one argument with exactly the value given; the command line splits, as a shell splits it, into
// exactly our words. Inputs that break Slurm's syntax are refused with a UsageError.
//   scripts/fuzz.sh 60 sbatch
// Input: the four strings separated by NUL bytes, then rerun, then 4 bytes of numbers.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "normlab/sweep.h"

namespace {

[[noreturn]] void finding(const std::string& what, const std::string& script) {
  std::fprintf(stderr, "finding: %s\n--- script ---\n%s--- end ---\n", what.c_str(), script.c_str());
  std::abort();
}

// One #SBATCH line's arguments, as Slurm's _get_argument reads them; `old` is the parser of Slurm
// before 19.05 (a '"' toggles quoting, ' is a plain character, '#' always ends the line).
std::vector<std::string> directive_args(const std::string& line, bool old, const std::string& script) {
  std::vector<std::string> args;
  size_t i = 7;  // after "#SBATCH"
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i >= line.size()) break;
    std::string arg;
    char quote = 0;
    bool escape = false, comment = false;
    for (; i < line.size() && (quote || !std::isspace(static_cast<unsigned char>(line[i]))); ++i) {
      const char c = line[i];
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
        continue;
      } else if (old && c == '"') {
        quote = quote ? 0 : '"';
        continue;
      } else if (old && c == '#') {
        comment = true;
        break;
      } else if (!old && quote) {
        if (c == quote) {
          quote = 0;
          continue;
        }
      } else if (!old && (c == '"' || c == '\'')) {
        quote = c;
        continue;
      } else if (!old && c == '#') {
        comment = true;
        break;
      }
      arg += c;
    }
    if (quote) finding("unmatched quote in: " + line, script);
    if (!arg.empty()) args.push_back(arg);
    if (comment) break;
  }
  return args;
}

// The words of a shell command line made of our quoting: '...', "..." (holding only
// ${SLURM_ARRAY_TASK_ID}), and plain words of characters the shell takes as they are.
std::vector<std::string> shell_words(const std::string& line, const std::string& script) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size()) break;
    std::string w;
    while (i < line.size() && line[i] != ' ') {
      const char c = line[i];
      if (c == '\'') {
        const size_t end = line.find('\'', i + 1);
        if (end == std::string::npos) finding("unmatched ' in the command", script);
        w += line.substr(i + 1, end - i - 1);
        i = end + 1;
      } else if (c == '\\') {
        if (i + 1 >= line.size()) finding("a trailing backslash in the command", script);
        w += line[i + 1];
        i += 2;
      } else if (c == '"') {
        const size_t end = line.find('"', i + 1);
        if (end == std::string::npos) finding("unmatched \" in the command", script);
        const std::string inside = line.substr(i + 1, end - i - 1);
        if (inside.find_first_of("\\`") != std::string::npos ||
            inside.rfind("${SLURM_ARRAY_TASK_ID}/", 0) != 0 ||
            inside.find('$', 1) != std::string::npos)
          finding("a double-quoted word that is not ours: " + inside, script);
        w += inside;
        i = end + 1;
      } else {
        if (std::string("|&;<>()$`*?[]{}~!#\"\t\n").find(c) != std::string::npos)
          finding(std::string("an unquoted shell character '") + c + "' in the command", script);
        w += c;
        ++i;
      }
    }
    words.push_back(w);
  }
  return words;
}

std::string percent_escaped(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '%' ? std::string("%%") : std::string(1, c);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const std::string all(reinterpret_cast<const char*>(data), size - 4);
  const uint8_t* n = data + size - 4;
  std::vector<std::string> f;
  size_t start = 0;
  for (int k = 0; k < 4; ++k) {
    const size_t nul = all.find('\0', start);
    f.push_back(all.substr(start, nul == std::string::npos ? std::string::npos : nul - start));
    start = nul == std::string::npos ? all.size() : nul + 1;
  }
  const std::string rerun_text = all.substr(start);
  normlab::SlurmOptions o;
  const std::string dir = f[0];
  o.exe = f[1];
  o.partition = f[2];
  o.time = f[3];
  // small numbers, 0 and negatives included: the checks must refuse what sbatch would
  o.cpus = static_cast<int8_t>(n[0]);
  o.threads = static_cast<int8_t>(n[1]);
  o.array_max = static_cast<int8_t>(n[2]);
  o.shards = static_cast<int8_t>(n[3]);
  const size_t points = 64;

  normlab::fuzz::only_usage_errors([&] {
    o.rerun = normlab::parse_rerun(rerun_text);
    normlab::check_slurm_options(dir, o, points);
    const std::string script = normlab::sbatch_script(dir, o);

    for (unsigned char c : script)
      if ((c < 0x20 && c != '\n') || c == 0x7f) finding("a control character in the script", script);
    std::vector<std::string> lines;
    for (size_t p = 0; p < script.size();) {
      const size_t nl = script.find('\n', p);
      if (nl == std::string::npos) finding("no newline at the end", script);
      lines.push_back(script.substr(p, nl - p));
      p = nl + 1;
    }
    std::error_code ec;
    const std::string abs_dir = std::filesystem::absolute(dir, ec).lexically_normal().string();
    std::vector<std::pair<std::string, std::string>> want = {
        {"--job-name", "normlab-sweep"},
        {"--array", "0-" + std::to_string(o.shards - 1) + (o.array_max > 0 ? "%" + std::to_string(o.array_max) : "")},
        {"--ntasks", "1"},
        {"--cpus-per-task", std::to_string(o.cpus)}};
    if (!o.partition.empty()) want.emplace_back("--partition", o.partition);
    if (!o.time.empty()) want.emplace_back("--time", o.time);
    want.emplace_back("--output", percent_escaped(abs_dir) + "/slurm/%A_%a.out");
    size_t k = 0;
    for (const std::string& line : lines) {
      if (line.rfind("#SBATCH", 0) != 0 && line.rfind("#SLURM", 0) != 0) continue;
      if (k >= want.size()) finding("an extra directive: " + line, script);
      for (bool old : {false, true}) {
        const std::vector<std::string> args = directive_args(line, old, script);
        const std::string expect = want[k].first + "=" + want[k].second;
        if (args.size() != 1 || args[0] != expect)
          finding(std::string(old ? "old" : "new") + " sbatch reads '" + line + "' as something else than '" + expect + "'",
                  script);
      }
      ++k;
    }
    if (k != want.size()) finding("a directive is missing", script);
    std::vector<std::string> words = {o.exe, "sweep", abs_dir + "/spec.json", "--out", abs_dir, "--shard",
                                      "${SLURM_ARRAY_TASK_ID}/" + std::to_string(o.shards), "--jobs",
                                      std::to_string(o.cpus), "--threads", std::to_string(o.threads)};
    if (!o.rerun.empty()) {
      std::string list;
      for (const std::string& r : o.rerun) list += (list.empty() ? "" : ",") + r;
      words.push_back("--rerun");
      words.push_back(list);
    }
    words.insert(words.begin(), "exec");
    if (lines.empty() || shell_words(lines.back(), script) != words) finding("the command's words differ", script);
    for (size_t i = 0; i + 1 < lines.size(); ++i)
      if (!lines[i].empty() && lines[i][0] != '#' && lines[i] != "set -euo pipefail")
        finding("a line that is neither a comment nor ours: " + lines[i], script);
  });
  return 0;
}
