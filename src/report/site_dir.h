// A report site on disk: what proves normlab wrote a directory, how a new site is written and how
// it takes the place of an earlier one (normlab/report.h).
//
// The marker OUT/.normlab-report is written last and lists every other file of the site with its
// size and SHA-256 ('%' and bytes outside printable ASCII in a path as %XX):
//   {"written_by": "normlab report", "files": {"index.html": {"bytes": 2210, "sha256": "9f2c..."}, ...}}
// A directory is a site only when its marker is such a list (an empty marker, a line of text,
// one torn by a kill: not a site), and a site may be replaced only while everything in it is a
// listed file as it was written, or a folder holding them: a file a person added or changed makes
// the report refuse, naming it, and nothing is touched.
#pragma once
#include <functional>
#include <map>
#include <string>

namespace normlab::site_dir {

// Why the existing `dir` may not be replaced by a new site ("holds 'notes.txt', which `normlab
// report` did not write"); "" when it may. Never throws.
std::string refusal(const std::string& dir);

// The site's files under `tmp` (a directory this process made), then the marker listing them.
// `stop` is called before each file (it throws Interrupted when the command is asked to stop).
void write(const std::string& tmp, const std::map<std::string, std::string>& files, const std::function<void()>& stop);

// The finished site at `tmp` takes `out`'s place. An earlier site at `out` is moved aside to
// <out>.old.partial.<pid> and checked again there (put back, and a UsageError, if it is no longer
// a site as written: someone changed it meanwhile); after the rename its listed files are removed
// one by one, then its emptied folders; anything else found there is kept and named to `on_notice`.
// `shown_out` is --out as the user wrote it, for messages.
void install(const std::string& tmp, const std::string& out, const std::string& shown_out,
             const std::function<void(const std::string&)>& on_notice);

// Where install() moves an earlier site while it replaces it: <out>.old (as a partial name).
std::string aside_name(const std::string& out);

// `text` with every byte `keep` does not keep written as %XX (upper-case hex): the marker's file
// names and the pages' links spell paths this way, each with its own set of bytes kept.
std::string percent_encoded(const std::string& text, bool (*keep)(unsigned char));

}  // namespace normlab::site_dir
