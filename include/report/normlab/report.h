// `normlab report DIR...`: one static HTML site of sweeps and runs, self-contained (no network:
// no CDN, fonts or scripts from elsewhere; it works opened from file://).
//
//   OUT/index.html                 every sweep (points and how they ended) and every run found
//   OUT/experiments.html           with a REPRODUCTION.md: each claim of its verdict table, linked
//                                  to the sweeps its section cites
//   OUT/sweeps/<sweep>/index.html  the summary table and a table of every point (both sortable by
//                                  any column), the sweep's plots, a link to each point's run page
//   OUT/runs/<run>/index.html      config, result, plots and the metrics table of one run
//   OUT/style.css, OUT/sort.js     the only stylesheet and script (a few lines, no library)
//   OUT/.normlab-report            the marker, written last: every other file of the site with its
//                                  size and SHA-256 (src/report/site_dir.h)
//
// The site is written whole under OUT.partial.<pid> and then takes OUT's place. An existing OUT is
// replaced only when it is a site of an earlier `report` as that report wrote it: its marker lists
// every file in it, and each is unchanged. A person's directory, an empty or forged marker, a file
// added to a site or changed in it (a UsageError names it) or OUT named like a partial
// (SITE.partial.<pid>) are refused before anything is written, and the earlier site's files are
// removed one by one as listed: nothing else is ever deleted. Bad input (nothing to report, a path
// that is not a run or sweep directory or a folder of them, two sweeps of one name) is a UsageError
// before anything is written. An interrupt (ReportRequest::interrupt) before the site takes its
// place removes the partial directory and throws Interrupted.
#pragma once
#include <csignal>
#include <functional>
#include <string>
#include <vector>

namespace normlab {

struct ReportRequest {
  std::vector<std::string> inputs;  // run directories, sweep directories, folders of them (results/)
  std::string out = "report";
  // A REPRODUCTION.md whose claims get a page; empty: <input>/REPRODUCTION.md of the first input
  // that has one (results/ does).
  std::string reproduction;
  // Set (by a signal handler) when the command is asked to stop: the report stops between files,
  // removes its partial directory and throws Interrupted.
  const volatile std::sig_atomic_t* interrupt = nullptr;
  // Things worth a warning: partial directories left by a report that was killed.
  std::function<void(const std::string&)> on_notice;
};

struct ReportResult {
  std::string out;
  size_t sweeps = 0, runs = 0, pages = 0, files = 0;
  bool experiments = false;  // experiments.html was written
};

ReportResult write_report(const ReportRequest& request);

// The marker file of a site.
inline constexpr const char* kReportMarker = ".normlab-report";

}  // namespace normlab
