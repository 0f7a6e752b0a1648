// Run directories: validated before anything is created, written under a temporary name,
// renamed when whole.
#include "normlab/run.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "normlab/backend.h"
#include "normlab/checkpoint.h"
#include "normlab/config.h"
#include "normlab/io.h"
#include "normlab/stats.h"
#include "normlab/system.h"

namespace normlab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
// JSON has no NaN/Inf: a diverged loss is written as null.
constexpr auto num = json_number<json>;

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

int64_t file_size_or_zero(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string parent_dir(const std::string& dir) {
  const size_t slash = dir.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : dir.substr(0, slash);
}

// The latest step N in <run>/checkpoints with both step-N.safetensors and step-N.state.safetensors
// (written in that order, each atomically: the state file's presence means the pair is whole);
// 0 when there is none.
int64_t latest_checkpoint(const std::string& run) {
  int64_t best = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(run + "/checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    const std::string head = "step-", tail = ".state.safetensors";
    if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
    if (digits.empty() || digits.size() > 15 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int64_t step = std::stoll(digits);
    if (step > best && is_regular(run + "/checkpoints/" + fmt::format("step-{}.safetensors", step))) best = step;
  }
  return best;
}

std::string checkpoint_file(const std::string& run, int64_t step) {
  return fmt::format("{}/checkpoints/step-{}.safetensors", run, step);
}
std::string state_file(const std::string& run, int64_t step) {
  return fmt::format("{}/checkpoints/step-{}.state.safetensors", run, step);
}

// The finished run `tmp` becomes `dir`. When `old` is given, the run directory that was at dir
// when the run started is replaced, and only that one: same device and inode, and still a run
// directory (an inode number freed by removing the old run is often handed to the next directory
// made, so a person's directory put in its place can carry the same one); anything else found at
// dir, or a failure, keeps the finished run at tmp and says so.
void claim(const std::string& tmp, const std::string& dir, const struct stat* old, const std::string& shown_dir) {
  const std::string kept = fmt::format("the finished run is kept at {}", shown(tmp, 200));
  std::string aside;
  if (old) {
    aside = dir + ".replaced." + std::to_string(getpid());
    struct stat now {};
    const bool same = ::lstat(dir.c_str(), &now) == 0 && now.st_dev == old->st_dev && now.st_ino == old->st_ino &&
                      is_run_directory(dir);
    if (!same) {
      // Gone (someone removed it: nothing to replace) or another directory took its place.
      if (::lstat(dir.c_str(), &now) == 0)
        throw UsageError(fmt::format("'{}' was replaced by something else while this run was going; {}",
                                     shown(shown_dir, 200), kept));
      aside.clear();
    } else if (!rename_noreplace(dir, aside)) {
      throw UsageError(fmt::format("cannot move the old run '{}' aside: {}; {}", shown(shown_dir, 200),
                                   std::strerror(errno), kept));
    } else if (::lstat(aside.c_str(), &now) != 0 || now.st_ino != old->st_ino || now.st_dev != old->st_dev ||
               !is_run_directory(aside)) {
      ::renameat2(AT_FDCWD, aside.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE);  // put it back
      throw UsageError(fmt::format("'{}' changed while this run was going; {}", shown(shown_dir, 200), kept));
    }
  }
  if (!rename_noreplace(tmp, dir)) {
    const int e = errno;
    if (!aside.empty()) ::renameat2(AT_FDCWD, aside.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE);
    if (e == EEXIST || e == ENOTEMPTY)
      throw UsageError(fmt::format("'{}' appeared while this run was going (another run into the same --out?); {}",
                                   shown(shown_dir, 200), kept));
    throw UsageError(fmt::format("cannot rename {} to '{}': {}; {}", shown(tmp, 200), shown(shown_dir, 200),
                                 std::strerror(e), kept));
  }
  if (!aside.empty() && is_run_directory(aside)) {
    std::error_code ec;
    fs::remove_all(aside, ec);  // removes symlinks inside, never what they point to
  }
}

}  // namespace

std::string eval_to_json_line(const EvalRecord& r) {
  using M = EvalField::InMetrics;
  json j{{"step", r.step}};
  for (const EvalField& f : eval_fields()) {
    // Low precision's fields only where a run has them: fp32 runs' lines are as they were.
    if (f.in_metrics == M::never || (f.in_metrics == M::loss_scaled && !std::isfinite(r.loss_scale)) ||
        (f.in_metrics == M::when_listed && (r.*f.list).empty()))
      continue;
    if (f.number) j[f.name] = num(r.*f.number);
    if (f.count) j[f.name] = r.*f.count;
    if (!f.list) continue;
    j[f.name] = json::array();
    for (double v : r.*f.list) j[f.name].push_back(num(v));
  }
  return j.dump();
}

std::string timing_to_json_line(const EvalRecord& r) {
  return json{{"step", r.step}, {"seconds_per_step", r.seconds_per_step}, {"tokens_per_second", r.tokens_per_second}}.dump();
}

std::string result_to_json(const TrainConfig& cfg, const TrainResult& r,
                           const std::map<std::string, std::string>& versions) {
  const EvalRecord last = r.evals.empty() ? EvalRecord{} : r.evals.back();
  json plateaus = json::array();
  for (const auto& [from, to] : r.plateaus) plateaus.push_back({from, to});
  json j{{"status", r.status},
         {"steps_done", r.steps_done},
         {"plateaus", plateaus},
         {"diverged_step", r.diverged_step >= 0 ? json(r.diverged_step) : json(nullptr)},
         {"diverged_reason", r.diverged_reason},
         {"collapsed_step", r.collapsed_step >= 0 ? json(r.collapsed_step) : json(nullptr)},
         {"final_train_loss", num(r.final_train_loss)},
         {"final_val_loss", num(r.final_val_loss)},
         {"best_val_loss", num(r.best_val_loss)},
         {"best_val_step", r.best_val_step},
         {"loss_floor", num(r.loss_floor)},
         {"unigram_loss", num(r.unigram_loss)},
         {"gap_to_floor", num(r.gap_to_floor())},
         {"final_val_loss_se", num(last.val_loss_se)},
         {"final_oracle_loss", num(last.val_oracle_loss)},
         {"final_excess_loss", num(last.excess_loss)},
         {"final_excess_loss_se", num(last.excess_loss_se)},
         {"val_tokens", cfg.eval_batches * cfg.batch_size * cfg.model.seq_len},
         {"spike_count", r.spike_count},
         {"spike_steps", r.spike_steps},
         {"spike_rule", fmt::format("a step whose training loss exceeds {} x the median of the {} steps before it",
                                    kSpikeFactor, kSpikeWindow)},
         {"parameters", r.parameters},
         {"timing", {{"seconds", r.seconds}, {"seconds_per_step", r.seconds_per_step},
                     {"tokens_per_second", r.tokens_per_second}, {"threads", r.threads}}},
         {"versions", versions}};
  json choices = json::array();
  for (const KernelChoice& k : r.kernel_choices)
    choices.push_back({{"kernel", k.kernel}, {"variant", k.variant}, {"source", k.source}});
  j["kernel_choices"] = choices;
  if (std::isfinite(r.final_loss_scale)) {
    j["skipped_steps"] = r.skipped_steps;
    j["final_loss_scale"] = r.final_loss_scale;
  }
  if (r.nonfinite.step >= 0)
    j["nonfinite"] = {{"step", r.nonfinite.step},     {"phase", r.nonfinite.phase},   {"op", r.nonfinite.op},
                      {"module", r.nonfinite.module}, {"format", r.nonfinite.format}, {"cause", r.nonfinite.cause},
                      {"max_abs", num(r.nonfinite.max_abs)}, {"text", r.nonfinite.str()}};
  if (!r.eps_rounding.empty()) {
    json eps = json::array();
    for (const EpsRounding& e : r.eps_rounding)
      eps.push_back({{"norm", e.norm}, {"eps", e.eps}, {"stored", e.stored}, {"format", e.format}});
    j["eps_rounding"] = eps;
  }
  j["config"] = json::parse(config_to_json(cfg));
  return j.dump(2);
}

const std::vector<std::string>& result_number_fields() {
  static const std::vector<std::string> fields = {
      "final_val_loss", "best_val_loss", "final_train_loss", "gap_to_floor", "loss_floor", "unigram_loss",
      "best_val_step",  "steps_done",    "diverged_step",    "collapsed_step", "parameters",
      "final_val_loss_se", "final_oracle_loss", "final_excess_loss", "final_excess_loss_se", "val_tokens", "spike_count"};
  return fields;
}

void validate_run(const TrainConfig& cfg) {
  validate_config(cfg);
  double data_bytes = 0;
  if (cfg.data.kind == DataKind::text) {
    make_data_source(cfg);  // the file is read and checked (a regular file, bounded in size, long enough)
    // At the peak: the file, its token ids (4 bytes each), the validation split's copy, and for
    // characters the decoded code points (4 bytes each) too.
    const double per_byte = cfg.tokens() == Tokenizer::chars ? 10.0 : 6.0;
    data_bytes = per_byte * static_cast<double>(file_size_or_zero(cfg.data.path));
  }
  check_fits_in_memory(cfg, cfg.batch_size, "train", data_bytes);
  if (!cfg.init_from.empty()) {  // the checkpoint is read and matched against the config
    const std::unique_ptr<TrainModel> model = make_train_model(cfg.model, cfg.seed);
    load_model_state(*model, load_safetensors(cfg.init_from), cfg.init_from);
  }
}

std::string enclosing_run_or_sweep(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) p = fs::absolute(path).lexically_normal();
  for (; !p.empty(); p = p.parent_path()) {
    if (is_run_directory(p.string()) ||
        (p.filename() == "runs" && fs::is_regular_file(p.parent_path() / "spec.json", ec)))
      return p.string();
    if (p == p.root_path()) break;
  }
  return "";
}

bool is_run_directory(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  // Only files a run writes (and leftovers of its atomic writes, <file>.tmp.<pid>): a file a
  // person added makes the directory theirs too, and --force does not replace it.
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    const bool run_file = name == kRunMarker || name == "config.json" || name == "result.json" ||
                          name == "metrics.jsonl" || name == "timing.jsonl" || name == "model.safetensors" ||
                          name.find(".tmp.") != std::string::npos;
    if (name == "checkpoints" && !e.is_symlink(ec) && e.is_directory(ec)) {
      // The run's own checkpoints/step-<N>.safetensors, nothing else.
      for (const fs::directory_entry& c : fs::directory_iterator(e.path(), ec)) {
        const std::string cn = c.path().filename().string();
        const bool ckpt = cn.rfind("step-", 0) == 0 &&
                          ((cn.size() > 17 && cn.compare(cn.size() - 12, 12, ".safetensors") == 0) ||
                                                      cn.find(".tmp.") != std::string::npos);
        if (!ckpt || c.is_symlink(ec) || !c.is_regular_file(ec)) return false;
      }
      continue;
    }
    if (!run_file || e.is_symlink(ec) || e.is_directory(ec)) return false;
  }
  if (ec) return false;
  if (is_regular(path + "/" + kRunMarker)) return true;
  return is_regular(path + "/config.json") && is_regular(path + "/result.json");  // a run from before the marker
}

void check_run_destination(const RunOptions& opt) {
  NL_USAGE(!opt.dir.empty(), "no run directory given (--out DIR)");
  const std::string dir = without_trailing_slashes(opt.dir);
  const std::string name = fs::path(dir).filename().string();
  NL_USAGE(!dir.empty() && name != "." && name != ".." && dir != "/",
           "--out '{}' must name a run directory to create, not '{}'", shown(opt.dir, 200),
           dir.empty() || dir == "/" ? "/" : name);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0) {
    NL_USAGE(!S_ISLNK(st.st_mode), "--out '{}' is a symbolic link; normlab neither follows nor replaces it",
             shown(opt.dir, 200));
    NL_USAGE(S_ISDIR(st.st_mode), "--out '{}' exists and is not a directory; choose another --out",
             shown(opt.dir, 200));
    const bool ours = is_run_directory(dir);
    NL_USAGE(ours, "--out '{}' exists and is not a normlab run directory (no {}, or files normlab did not write); "
             "normlab never replaces it, even with --force: choose another --out", shown(opt.dir, 200), kRunMarker);
    NL_USAGE(opt.force, "run directory '{}' exists (use --force to replace it)", shown(opt.dir, 200));
    struct stat cwd {};
    NL_USAGE(!(::stat(".", &cwd) == 0 && cwd.st_dev == st.st_dev && cwd.st_ino == st.st_ino),
             "--out '{}' is the current directory; normlab does not replace it", shown(opt.dir, 200));
  }
  const std::string parent = parent_dir(dir);
  struct stat pst {};
  NL_USAGE(::stat(parent.c_str(), &pst) == 0 && S_ISDIR(pst.st_mode), "the parent directory of '{}' does not exist",
           shown(opt.dir, 200));
  NL_USAGE(::access(parent.c_str(), W_OK | X_OK) == 0, "the parent directory of '{}' is not writable",
           shown(opt.dir, 200));
  for (const auto& [path, pid] : partials_of(dir)) {
    NL_USAGE(pid == getpid() || !process_alive(pid),
             "another normlab run (process {}) is writing '{}' ({}); wait for it or choose another --out", pid,
             shown(opt.dir, 200), shown(path, 200));
  }
}

ResumableRun find_resumable(const std::string& path_in) {
  const std::string path = without_trailing_slashes(path_in);
  NL_USAGE(!path.empty(), "--resume needs a run directory");
  ResumableRun r;
  long pid = 0;
  if (split_partial(path, &r.dir, &pid)) {
    r.partial = path;
  } else {
    r.dir = path;
    NL_USAGE(!is_regular(path + "/result.json"), "run '{}' is finished (it has its result.json); nothing to resume",
             shown(path_in, 200));
    std::vector<std::string> found;
    for (const auto& [p, owner] : partials_of(path))
      if (latest_checkpoint(p) > 0) found.push_back(p);
    NL_USAGE(!found.empty(),
             "no stopped run of '{}' to resume: no {}.partial.<pid> directory with a checkpoint (a run keeps its "
             "partial directory when stopped only if it saved checkpoints: train --save_every N)",
             shown(path_in, 200), shown(path, 200));
    if (found.size() > 1) {
      std::string list;
      for (const std::string& p : found) list += (list.empty() ? "" : ", ") + shown(p, 200);
      throw UsageError(fmt::format("several stopped runs of '{}' can be resumed ({}): name one", shown(path_in, 200), list));
    }
    r.partial = found[0];
    split_partial(r.partial, &r.dir, &pid);
  }
  struct stat st {};
  NL_USAGE(::lstat(r.partial.c_str(), &st) == 0, "'{}' does not exist", shown(r.partial, 200));
  NL_USAGE(S_ISDIR(st.st_mode) && is_run_directory(r.partial), "'{}' is not a normlab run directory",
           shown(r.partial, 200));
  NL_USAGE(pid == getpid() || !process_alive(pid), "'{}' is still being written by process {}; wait for it or stop it",
           shown(r.partial, 200), pid);
  const int64_t step = latest_checkpoint(r.partial);
  NL_USAGE(step > 0,
           "'{}' has no checkpoint to continue from (checkpoints/step-N.safetensors with its step-N.state.safetensors; "
           "train --save_every N writes them)",
           shown(r.partial, 200));
  // The run goes on inside the partial (its metrics rewritten, later checkpoints added): one it
  // cannot write is refused before it is taken over, so it keeps its name.
  for (const std::string& d : {r.partial, r.partial + "/checkpoints", r.partial + "/metrics.jsonl", r.partial + "/timing.jsonl"})
    NL_USAGE(::access(d.c_str(), F_OK) != 0 || ::access(d.c_str(), W_OK) == 0, "'{}' cannot be resumed: '{}' is not writable ({})",
             shown(r.partial, 200), shown(d, 200), std::strerror(errno));
  r.config = load_train_config(r.partial + "/config.json", {});
  std::map<std::string, std::string> meta;
  r.point.weights = checkpoint_file(r.partial, step);
  r.point.state = load_train_state(state_file(r.partial, step), &meta);
  NL_USAGE(r.point.state.step == step, "'{}' says it is the state at step {}, not {}", shown(state_file(r.partial, step), 200),
           r.point.state.step, step);
  NL_USAGE(step < r.config.steps, "'{}' reached its last step ({}); nothing to resume", shown(r.partial, 200), step);
  // The weights must be this config's model.
  const std::unique_ptr<TrainModel> model = make_train_model(r.config.model, r.config.seed);
  load_model_state(*model, load_safetensors(r.point.weights), r.point.weights);
  NL_USAGE(r.point.state.adam_m.numel() == model->params().count(),
           "'{}' holds optimizer moments for {} parameters; the model has {}", shown(state_file(r.partial, step), 200),
           r.point.state.adam_m.numel(), model->params().count());
  if (auto it = meta.find("save_every"); it != meta.end()) {
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (end && *end == '\0' && v > 0) r.save_every = v;
  }
  return r;
}

namespace {

// Everything refused before a directory is made, then what a person should know about it.
void check_run(const TrainConfig& cfg, const RunOptions& opt, const std::string& dir) {
  TrainConfig checked = cfg;
  if (opt.resume) checked.init_from.clear();  // the weights come from the checkpoint, not from init_from
  validate_run(checked);
  check_run_destination(opt);
  NL_CHECK(!opt.resume || opt.resume->dir == dir, "resuming {} into {}", opt.resume ? opt.resume->dir : "", dir);
  if (!opt.on_notice) return;
  for (const std::string& p : stale_partials(dir)) {
    if (opt.resume && p == opt.resume->partial) continue;
    opt.on_notice(fmt::format("{} is left from an interrupted run (its process is gone); it is not a finished run: "
                              "look at it or remove it (rm -r '{}')",
                              p, p));
  }
  for (const EpsRounding& e : eps_rounding(cfg)) opt.on_notice(eps_rounding_warning(e));
}

// DIR's partial directory of this process, made (or a stopped run taken over into it).
std::string take_partial(const RunOptions& opt, const std::string& dir) {
  const std::string tmp = partial_path(dir);
  if (opt.resume && opt.resume->partial == tmp) {
    // A stopped run of a process that had this pid: it is ours to continue in place.
  } else if (is_run_directory(tmp)) {  // a partial of a dead process that had this pid
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }
  if (opt.resume) {
    // Taken over by a rename: of two resumes of one stopped run, one gets it.
    NL_USAGE(opt.resume->partial == tmp || rename_noreplace(opt.resume->partial, tmp), "cannot take over '{}': {}",
             shown(opt.resume->partial, 200), std::strerror(errno));
  } else {
    NL_USAGE(::mkdir(tmp.c_str(), 0755) == 0, "cannot create '{}': {}", shown(tmp, 200), std::strerror(errno));
  }
  return tmp;
}

// A new run's marker and config; a resumed run loses the checkpoints past the one it resumes from
// (of a stopped process: the run writes them again).
void start_partial(const TrainConfig& cfg, const RunOptions& opt, const std::string& tmp) {
  if (!opt.resume) {
    write_file_atomic(tmp + "/" + kRunMarker, "a normlab run directory (normlab train)\n");
    write_file_atomic(tmp + "/config.json", config_to_json(cfg) + "\n");
    return;
  }
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(tmp + "/checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    long long step = 0;
    if (std::sscanf(name.c_str(), "step-%lld.", &step) == 1 && step > opt.resume->point.state.step) fs::remove(e.path(), ec);
  }
}

// The trainer's hooks for a run written into `tmp`: each eval recorded (then the caller's hook),
// the interrupt checked each step, checkpoints every save_every steps (saved_step: the latest,
// resumable) and the final weights.
TrainHooks run_hooks(const TrainConfig& cfg, const RunOptions& opt, const std::string& tmp,
                     const std::function<void(const EvalRecord&)>& record, int64_t& saved_step) {
  TrainHooks hooks;
  hooks.on_eval = [&opt, record](const EvalRecord& r) {
    record(r);
    if (opt.on_eval) opt.on_eval(r);
  };
  hooks.on_step = [&opt](int64_t step, double loss) {
    if (opt.interrupt && *opt.interrupt) throw Interrupted("", static_cast<int>(*opt.interrupt));
    if (opt.on_step) opt.on_step(step, loss);
  };
  hooks.checkpoint_every = opt.save_every;
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"normlab_config", config_to_json(cfg)}};
  hooks.on_checkpoint = [&cfg, &opt, tmp, meta, &saved_step](int64_t step, TrainModel& model, const TrainState& state) {
    if (opt.save_every > 0 && step % opt.save_every == 0 && step < cfg.steps) {
      std::error_code mkdir_ec;
      fs::create_directories(tmp + "/checkpoints", mkdir_ec);
      NL_USAGE(!mkdir_ec, "cannot create '{}/checkpoints': {}", shown(tmp, 200), mkdir_ec.message());
      save_safetensors(checkpoint_file(tmp, step), model_state(model), meta);
      save_train_state(state_file(tmp, step), state, {{"save_every", std::to_string(opt.save_every)}});
      saved_step = step;
      return;
    }
    save_safetensors(tmp + "/model.safetensors", model_state(model), meta);
  };
  return hooks;
}

// The run in `tmp` failed (called from a handler; rethrows): a run with a checkpoint is kept, and
// the error says how to continue it; any other is removed.
[[noreturn]] void keep_or_remove_partial(const std::string& tmp, int64_t saved_step) {
  const std::string resume_hint = "`normlab train --resume " + shown(tmp, 200) + "` continues it";
  std::error_code ec;
  try {
    throw;
  } catch (const Interrupted& e) {
    if (saved_step > 0)
      throw Interrupted(fmt::format("interrupted by {}; the run so far is kept in {} (checkpoint at step {}): {}",
                                    signal_name(e.signal), shown(tmp, 200), saved_step, resume_hint),
                        e.signal);
    fs::remove_all(tmp, ec);
    throw Interrupted(fmt::format("interrupted by {}; the unfinished run {} was removed", signal_name(e.signal),
                                  shown(tmp, 200)),
                      e.signal);
  } catch (const UsageError& e) {
    if (saved_step > 0)  // a run that can be continued is not thrown away
      throw UsageError(fmt::format("{}; the run so far is kept in {} (checkpoint at step {}): {}", e.what(),
                                   shown(tmp, 200), saved_step, resume_hint));
    fs::remove_all(tmp, ec);
    throw;
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace

std::string run_and_record(const TrainConfig& cfg, const RunOptions& opt, TrainResult* out) {
  const std::string dir = without_trailing_slashes(opt.dir);
  check_run(cfg, opt, dir);
  // The run directory that --force may replace: the one there now, by identity.
  struct stat old {};
  const bool replace = ::lstat(dir.c_str(), &old) == 0;
  const std::string tmp = take_partial(opt, dir);
  int64_t saved_step = opt.resume ? opt.resume->point.state.step : 0;  // the latest resumable checkpoint
  std::string result;
  TrainResult r;
  try {
    start_partial(cfg, opt, tmp);
    CheckedFile metrics(tmp + "/metrics.jsonl"), timing(tmp + "/timing.jsonl");
    auto record = [&](const EvalRecord& e) {
      metrics.write(eval_to_json_line(e) + "\n");
      timing.write(timing_to_json_line(e) + "\n");
    };
    if (opt.on_start) opt.on_start();
    if (opt.resume) {
      for (const EvalRecord& e : opt.resume->point.state.evals) {
        record(e);
        if (opt.on_eval) opt.on_eval(e);
      }
    }
    ResumePoint point;
    if (opt.resume) {
      point = opt.resume->point;
      point.weights = checkpoint_file(tmp, point.state.step);  // the directory has been taken over
    }
    r = train(cfg, run_hooks(cfg, opt, tmp, record, saved_step), opt.resume ? &point : nullptr);
    if (opt.interrupt && *opt.interrupt) throw Interrupted("", static_cast<int>(*opt.interrupt));
    metrics.close();
    timing.close();
    result = result_to_json(cfg, r, opt.versions);
    write_file_atomic(tmp + "/result.json", result + "\n");
  } catch (...) {
    keep_or_remove_partial(tmp, saved_step);
  }
  // From here on the run is finished: never thrown away.
  claim(tmp, dir, replace ? &old : nullptr, opt.dir);
  if (out) *out = r;
  return result;
}

}  // namespace normlab
