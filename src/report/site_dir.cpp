// A report site on disk: the marker that lists its files, the check before a site is replaced,
// writing a site and putting it in place (site_dir.h).
#include "site_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/report.h"
#include "normlab/sha256.h"

namespace normlab::site_dir {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kWrittenBy = "normlab report";
// A marker larger than this is not one of ours (a site of 100,000 files lists ~10 MB).
constexpr int64_t kMaxMarkerBytes = int64_t{64} << 20;

struct Listed {
  uint64_t bytes = 0;
  std::string sha256;
};
using Manifest = std::map<std::string, Listed>;  // path below the site -> as written

// A path as the marker spells it: '%' and every byte outside printable ASCII as %XX, so that any
// name a run directory may have (not UTF-8, a control character) is JSON as it is, byte for byte.
std::string listed_name(const std::string& path) {
  return percent_encoded(path, [](unsigned char c) { return c >= 0x20 && c < 0x7f && c != '%'; });
}

// listed_name undone; false when `name` is not one it writes.
bool unlisted_name(const std::string& name, std::string* path) {
  path->clear();
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '%') {
      *path += name[i];
      continue;
    }
    if (i + 2 >= name.size() || !std::isxdigit(static_cast<unsigned char>(name[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(name[i + 2])))
      return false;
    *path += static_cast<char>(std::stoi(name.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return true;
}

std::string marker_text(const std::map<std::string, std::string>& files) {
  json list = json::object();
  for (const auto& [path, content] : files)
    list[listed_name(path)] = {{"bytes", content.size()}, {"sha256", sha256_hex(content)}};
  return json{{"written_by", kWrittenBy},
              {"note", "normlab report replaces this site only while every file in it is one listed here, as written"},
              {"files", list}}
             .dump(1) +
         "\n";
}

// A path a marker may list: relative, plain components, not the marker itself.
bool listable(const std::string& path) {
  if (path.empty() || path == kReportMarker || path.front() == '/' || path.back() == '/') return false;
  for (const fs::path& part : fs::path(path))
    if (part.empty() || part == "." || part == "..") return false;
  return path.find("//") == std::string::npos;
}

bool sha256_text(const json& v) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The files dir's marker lists; nothing when there is no marker, or it is not such a list.
std::optional<Manifest> read_manifest(const fs::path& dir, std::string* old_style = nullptr) {
  struct stat st {};
  const fs::path marker = dir / kReportMarker;
  if (::lstat(marker.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxMarkerBytes) return std::nullopt;
  std::string text;
  try {
    text = read_file(marker.string(), kMaxMarkerBytes);
  } catch (const Error&) {
    return std::nullopt;
  }
  if (old_style && text.rfind("a site written by `normlab report`", 0) == 0) *old_style = text;
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("written_by") || j["written_by"] != kWrittenBy || !j.contains("files") ||
      !j["files"].is_object())
    return std::nullopt;
  Manifest m;
  for (const auto& [name, v] : j["files"].items()) {
    std::string path;
    if (!unlisted_name(name, &path) || !listable(path) || !v.is_object() || !v.contains("bytes") || !v["bytes"].is_number_unsigned() ||
        !v.contains("sha256") || !sha256_text(v["sha256"]))
      return std::nullopt;
    m[path] = {v["bytes"].get<uint64_t>(), v["sha256"].get<std::string>()};
  }
  return m;
}

// Every folder that holds a listed file ("runs", "runs/grid", ...).
std::set<std::string> listed_folders(const Manifest& m) {
  std::set<std::string> out;
  for (const auto& [path, listed] : m)
    for (fs::path p = fs::path(path).parent_path(); !p.empty(); p = p.parent_path()) out.insert(p.string());
  return out;
}

// The file at `path` is the one listed: a regular file of the listed size and digest.
bool as_written(const fs::path& path, const Listed& listed) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != listed.bytes)
    return false;
  try {
    return sha256_hex(read_file(path.string(), static_cast<int64_t>(listed.bytes))) == listed.sha256;
  } catch (const Error&) {
    return false;
  }
}

// The first thing in dir that is not the site's as written ("" when there is none), as the end
// of a sentence about --out.
std::string first_foreign(const fs::path& dir, const Manifest& m) {
  const std::set<std::string> folders = listed_folders(m);
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  if (ec) return fmt::format("cannot be read: {}", ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return fmt::format("cannot be read: {}", ec.message());
    const std::string rel = it->path().lexically_relative(dir).string();
    if (rel == kReportMarker) continue;
    const fs::file_status st = it->symlink_status(ec);
    if (fs::is_directory(st) && folders.count(rel)) continue;
    const auto listed = m.find(rel);
    if (listed == m.end() || !fs::is_regular_file(st))
      return fmt::format("holds '{}', which `normlab report` did not write", shown(rel, 200));
    if (!as_written(it->path(), listed->second))
      return fmt::format("holds '{}', which was changed after `normlab report` wrote it", shown(rel, 200));
  }
  return "";
}

// Removes the site at dir as its marker lists it: each listed file still as written, the folders
// left empty, the marker and dir itself. Returns false when something else was there: it is kept,
// and so are the folders holding it.
bool remove_site(const fs::path& dir, const Manifest& m) {
  for (const auto& [path, listed] : m)
    if (as_written(dir / path, listed)) ::unlink((dir / path).c_str());
  const std::set<std::string> listed = listed_folders(m);
  std::vector<std::string> folders(listed.begin(), listed.end());
  std::sort(folders.begin(), folders.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& f : folders) ::rmdir((dir / f).c_str());  // only when empty
  ::unlink((dir / kReportMarker).c_str());  // what is left, if anything, is no site
  return ::rmdir(dir.c_str()) == 0;
}

}  // namespace

std::string aside_name(const std::string& out) { return partial_path(out + ".old"); }

std::string percent_encoded(const std::string& text, bool (*keep)(unsigned char)) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (keep(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string refusal(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return fmt::format("cannot be read: {}", std::strerror(errno));
  if (S_ISLNK(st.st_mode)) return "is a symbolic link; normlab neither follows nor replaces it";
  if (!S_ISDIR(st.st_mode)) return "exists and is not a directory";
  std::string old_style;
  const std::optional<Manifest> m = read_manifest(dir, &old_style);
  if (!m && !old_style.empty())
    return fmt::format("is a site of an earlier normlab, whose {} does not list the files it wrote, so normlab cannot "
                       "tell them from yours: remove it yourself",
                       kReportMarker);
  if (!m)
    return fmt::format("exists and is not a site `normlab report` wrote (no {} listing the site's files)", kReportMarker);
  return first_foreign(dir, *m);
}

void write(const std::string& tmp, const std::map<std::string, std::string>& files, const std::function<void()>& stop) {
  std::error_code ec;
  for (const auto& [path, content] : files) {
    NL_CHECK(listable(path), "a site file named '{}'", path);
    stop();
    const fs::path p = fs::path(tmp) / path;
    fs::create_directories(p.parent_path(), ec);
    NL_USAGE(!ec, "cannot create '{}': {}", shown(p.parent_path().string(), 200), ec.message());
    CheckedFile f(p.string());
    f.write(content);
    f.close();
  }
  // Last: a site killed before this line has no marker, and is never taken for a finished one.
  stop();
  CheckedFile marker(tmp + "/" + kReportMarker);
  marker.write(marker_text(files));
  marker.close();
}

namespace {

// The earlier site moved aside back in `out`'s place; what the error says of it.
std::string put_back(const std::string& aside, const std::string& out) {
  if (rename_noreplace(aside, out)) return "nothing was replaced";
  return fmt::format("the earlier site is kept in {} (cannot put it back: {})", shown(aside, 200), std::strerror(errno));
}

}  // namespace

void install(const std::string& tmp, const std::string& out, const std::string& shown_out,
             const std::function<void(const std::string&)>& on_notice) {
  struct stat st {};
  const bool had = ::lstat(out.c_str(), &st) == 0;
  const std::string aside = aside_name(out);
  if (had) {
    // Checked (as at the start) where it is moved, where nobody writes: a file added before the
    // move is seen, and then it is put back.
    NL_USAGE(rename_noreplace(out, aside), "cannot move the earlier site '{}' aside: {}", shown(shown_out, 200),
             std::strerror(errno));
    const std::string now = refusal(aside);
    if (!now.empty())
      throw UsageError(fmt::format("--out '{}' changed while the site was written: it {}; {}", shown(shown_out, 200), now,
                                   put_back(aside, out)));
  }
  if (!rename_noreplace(tmp, out)) {
    const int e = errno;
    throw UsageError(fmt::format("cannot write '{}': {}{}", shown(shown_out, 200), std::strerror(e),
                                 had ? "; " + put_back(aside, out) : std::string()));
  }
  if (!had) return;
  const std::optional<Manifest> m = read_manifest(aside);
  if (!m || !remove_site(aside, *m))
    if (on_notice)
      on_notice(fmt::format("the earlier site, moved to {}, held files normlab did not write; they were kept there",
                            shown(aside, 200)));
}

}  // namespace normlab::site_dir
