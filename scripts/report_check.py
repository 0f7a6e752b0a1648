#!/usr/bin/env python3
"""Check a `normlab report` site: every page without a browser, a sample of every kind in headless Chromium.

    python3 scripts/report_check.py SITE [--screenshots DIR] [--chromium /usr/bin/chromium] [--all-pages]

Every *.html of SITE is read with html.parser (no browser): each a[href], link[href], script[src],
img[src] (and source/iframe/embed src, object data) must name a file of the site that exists (taken
relative to the page; a link with a scheme, an absolute path or one that leads out of SITE fails), and
a '#fragment' must name an id (or a[name]) of its target page.

Then Debian's chromium, driven over the DevTools protocol (python3-websocket), opens from file:// a
fixed sample that holds every kind of page: the index, the experiments page, every sweep's page, the
first and the last run page (in sorted order) of each sweep, every standalone run (runs/standalone/),
every page of a kind it does not know, and the first page of each structure (the set of its tags with
their classes and its images' file names) no page chosen so far has. --all-pages (ALL_PAGES=1 in
report_check.sh) opens every page instead. On each page opened it fails on
  - a console error or an uncaught exception (Runtime.consoleAPICalled error, Runtime.exceptionThrown),
  - a resource that did not load (Log.entryAdded errors: a missing stylesheet, script or image),
  - an image that loaded broken (naturalWidth 0),
  - a link (a[href]) to a file of the site that does not exist;
on the first sortable table of the index and of one sweep page it clicks a numeric column's header
and checks that the rows come back in order. With --screenshots it saves PNGs of the index, the
experiments page, a sweep page and a run page, to be looked at. Exit 0: every page clean; 1: some
page is not (each problem printed); 2: it could not run.
"""
import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from html.parser import HTMLParser


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Tab:
    """One page target of the browser, over its DevTools websocket."""

    def __init__(self, ws_url):
        import websocket  # python3-websocket
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def call(self, method, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_for(self, method, timeout=30):
        deadline = time.time() + timeout
        for i, e in enumerate(self.events):
            if e["method"] == method:
                del self.events[: i + 1]
                return e
        while time.time() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == method:
                return msg
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(method)

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluating {expression[:60]}: {r['exceptionDetails']}")
        return r["result"].get("value")


SORT_CHECK = r"""
(function () {
  var table = document.querySelector("table.sortable");
  if (!table || table.tBodies[0].rows.length < 2) return "no table";
  var ths = table.querySelectorAll("th");
  var key = function (cell) { return cell.dataset.v === undefined ? cell.textContent : cell.dataset.v; };
  var column = function (c) { return Array.from(table.tBodies[0].rows).map(function (r) { return r.cells[c]; }); };
  // the first column (names): as text
  ths[0].click();
  var t = column(0).map(key);
  for (var k = 1; k < t.length; ++k) if (isNaN(parseFloat(t[k])) && isNaN(parseFloat(t[k - 1])) && t[k] < t[k - 1])
    return "column " + ths[0].textContent + " not ascending after one click";
  // a numeric column: as numbers, both ways
  for (var c = 0; c < ths.length; ++c) {
    if (!column(c).every(function (x) { return x.dataset.v !== undefined && !isNaN(parseFloat(x.dataset.v)); })) continue;
    ths[c].click();
    if (ths[c].dataset.dir !== "asc") ths[c].click();
    var v = column(c).map(function (x) { return parseFloat(x.dataset.v); });
    for (var i = 1; i < v.length; ++i) if (v[i] < v[i - 1]) return "not ascending after a click on " + ths[c].textContent;
    ths[c].click();
    v = column(c).map(function (x) { return parseFloat(x.dataset.v); });
    for (var j = 1; j < v.length; ++j) if (v[j] > v[j - 1]) return "not descending after a second click on " + ths[c].textContent;
    return "ok";
  }
  return "no numeric column";
})()
"""

LINKS = "Array.from(document.querySelectorAll('a[href]')).map(function (a) { return a.href; })"
BROKEN_IMAGES = ("Array.from(document.images).filter(function (i) { return !i.complete || i.naturalWidth === 0; })"
                 ".map(function (i) { return i.src; })")


# The references a page makes to other files: (tag, attribute) -> checked as a link to a file of the site.
REFERENCES = {("a", "href"), ("link", "href"), ("script", "src"), ("img", "src"), ("source", "src"),
              ("iframe", "src"), ("embed", "src"), ("object", "data")}


class PageParser(HTMLParser):
    """One page read without a browser: its references, its ids and its structure."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.refs = []  # (line, tag, attribute, value)
        self.ids = set()
        self.structure = set()  # tag, tag.class, img:file name: what makes a kind of page

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.structure.add(tag)
        for c in (a.get("class") or "").split():
            self.structure.add(f"{tag}.{c}")
        for name in ("id",) + (("name",) if tag == "a" else ()):
            if a.get(name):
                self.ids.add(a[name])
        for attr, value in attrs:
            if (tag, attr) in REFERENCES:
                self.refs.append((self.getpos()[0], tag, attr, value or ""))
                if tag == "img":
                    self.structure.add("img:" + os.path.basename(urllib.parse.urlsplit(value or "").path))

    handle_startendtag = handle_starttag


def check_statically(site, pages):
    """Every reference of every page names a file of the site (and an id of it for a #fragment).
    Returns (problems, references checked, {page: structure})."""
    parsed = {}
    for page in pages:
        p = PageParser()
        with open(page, encoding="utf-8") as f:
            p.feed(f.read())
        p.close()
        parsed[page] = p
    problems, checked = [], 0
    for page, p in parsed.items():
        rel = os.path.relpath(page, site)
        for line, tag, attr, value in p.refs:
            checked += 1
            where = f'{rel}:{line}: <{tag} {attr}="{value}">'
            u = urllib.parse.urlsplit(value)
            if u.scheme == "data" and tag != "a":
                continue
            if u.scheme or u.netloc:
                problems.append(f"{where} leaves the site")
                continue
            if not value:
                problems.append(f"{where} is empty")
                continue
            if u.path.startswith("/"):
                problems.append(f"{where} is an absolute path")
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(page), urllib.parse.unquote(u.path))) if u.path else page
            if os.path.commonpath([site, target]) != site:
                problems.append(f"{where} leads out of the site")
            elif not os.path.isfile(target):
                problems.append(f"{where} is a broken link: no file {os.path.relpath(target, site)}")
            elif u.fragment and target in parsed and urllib.parse.unquote(u.fragment) not in parsed[target].ids:
                problems.append(f"{where} is a broken link: no id '{u.fragment}' in {os.path.relpath(target, site)}")
    return problems, checked, {page: frozenset(p.structure) for page, p in parsed.items()}


def page_kind(rel):
    if rel == "index.html":
        return "index"
    if rel == "experiments.html":
        return "experiments"
    if rel.startswith("sweeps/"):
        return "sweep"
    if rel.startswith("runs/"):
        return "run"
    return "other"


def browser_sample(site, pages, structures):
    """The pages opened in Chromium: fixed by the site alone (sorted paths), every kind of page in it.
    Besides the index, the experiments page, every sweep's page and every standalone run: the first and
    the last page of each runs/<sweep>/ (any other page likewise by its first two path components), and
    the first page of each (kind, structure) not yet among them. Returns [(page, why)], sorted."""
    rels = sorted(os.path.relpath(p, site) for p in pages)
    chosen = {}

    def take(rel, why):
        chosen.setdefault(rel, why)

    groups = {}  # every other page, by its first two path components (runs/<sweep>, ...)
    for r in rels:
        kind = page_kind(r)
        if kind in ("index", "experiments"):
            take(r, kind)
        elif kind == "sweep" and r.count("/") == 2 and r.endswith("/index.html"):
            take(r, "sweep page")
        elif r.startswith("runs/standalone/"):
            take(r, "standalone run")
        else:
            groups.setdefault("/".join(r.split("/")[:2]), []).append(r)
    for group, members in sorted(groups.items()):
        what = "run" if group.startswith("runs/") else "page"
        take(members[0], f"first {what} of {group}")
        take(members[-1], f"last {what} of {group}")
    seen = {(page_kind(r), structures[os.path.join(site, r)]) for r in chosen}
    for r in rels:
        key = (page_kind(r), structures[os.path.join(site, r)])
        if key not in seen:
            seen.add(key)
            take(r, "first page of its structure")
    return [(os.path.join(site, r), chosen[r]) for r in sorted(chosen)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("site")
    ap.add_argument("--screenshots", default="")
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
    ap.add_argument("--all-pages", action="store_true", help="open every page in Chromium, not the sample")
    ap.add_argument("--list-sample", action="store_true", help="print the pages Chromium would open and why, "
                    "and the static check's problems; open none")
    args = ap.parse_args()
    site = os.path.realpath(args.site)
    pages = sorted(os.path.join(d, f) for d, _, fs in os.walk(site) for f in fs if f.endswith(".html"))
    if not pages:
        print(f"report_check: no pages in {site}", file=sys.stderr)
        return 2
    started = time.time()
    problems, refs_checked, structures = check_statically(site, pages)
    static_s = time.time() - started
    sample = [(p, "every page") for p in pages] if args.all_pages else browser_sample(site, pages, structures)
    if args.list_sample:
        for page, why in sample:
            print(f"{os.path.relpath(page, site)}  ({why})")
        for p in problems[:50]:
            print(p)
        print(f"report_check: {len(pages)} pages checked statically ({refs_checked} links and images, {static_s:.1f} s), "
              f"{len(sample)} to load in Chromium; {len(problems)} problem(s)")
        return 1 if problems else 0
    try:
        import websocket  # noqa: F401
    except ImportError:
        print("report_check: needs python3-websocket (apt-get install python3-websocket)", file=sys.stderr)
        return 2
    port = free_port()
    profile = tempfile.mkdtemp(prefix="normlab_report_check.")
    browser = subprocess.Popen([args.chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
                                "--window-size=1400,1000", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        targets = None
        for _ in range(100):
            try:
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2))
                if any(t.get("type") == "page" for t in targets):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        if not targets:
            print("report_check: chromium did not start", file=sys.stderr)
            return 2
        tab = Tab(next(t for t in targets if t.get("type") == "page")["webSocketDebuggerUrl"])
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            tab.call(domain)
        links_checked = 0
        shots = {}
        started = time.time()
        for page, _ in sample:
            rel = os.path.relpath(page, site)
            tab.events.clear()
            tab.call("Page.navigate", url="file://" + urllib.parse.quote(page))
            tab.wait_for("Page.loadEventFired")
            tab.evaluate("new Promise(function (r) { setTimeout(r, 50); })")  # late console messages
            for e in tab.events:
                m, p = e["method"], e.get("params", {})
                if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                    problems.append(f"{rel}: console error: {p.get('args')}")
                elif m == "Runtime.exceptionThrown":
                    d = p["exceptionDetails"]
                    what = (d.get("exception", {}).get("description") or "").split("\n")[0]
                    problems.append(f"{rel}: exception: {d.get('text')} {what} (line {d.get('lineNumber', 0) + 1})")
                elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                    problems.append(f"{rel}: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            for src in tab.evaluate(BROKEN_IMAGES) or []:
                problems.append(f"{rel}: broken image {src}")
            for href in tab.evaluate(LINKS) or []:
                u = urllib.parse.urlparse(href)
                if u.scheme != "file":
                    problems.append(f"{rel}: a link leaves the site: {href}")
                    continue
                target = urllib.parse.unquote(u.path)
                if not os.path.exists(target):
                    problems.append(f"{rel}: broken link {href}")
                links_checked += 1
            kind = page_kind(rel)
            if kind in ("index", "sweep") and kind + "-sort" not in shots:
                verdict = tab.evaluate(SORT_CHECK)
                if verdict not in ("ok", "no numeric column", "no table"):
                    problems.append(f"{rel}: sorting: {verdict}")
                shots[kind + "-sort"] = verdict
            if args.screenshots and kind not in shots:
                os.makedirs(args.screenshots, exist_ok=True)
                tab.call("Page.navigate", url="file://" + urllib.parse.quote(page))  # unsorted, as first seen
                tab.wait_for("Page.loadEventFired")
                png = tab.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
                out = os.path.join(args.screenshots, kind + ".png")
                with open(out, "wb") as f:
                    f.write(base64.b64decode(png))
                shots[kind] = out
        browser_s = time.time() - started
        for p in problems[:50]:
            print(p)
        print(f"report_check: {len(pages)} pages checked statically ({refs_checked} links and images, {static_s:.1f} s), "
              f"{len(sample)} loaded in Chromium ({'all' if args.all_pages else 'a sample of every kind'}, "
              f"{links_checked} links, {browser_s:.1f} s); sorting {shots.get('index-sort')} (index) / "
              f"{shots.get('sweep-sort')} (sweep); {len(problems)} problem(s)"
              + (f"; screenshots in {args.screenshots}" if args.screenshots else ""))
        return 1 if problems else 0
    finally:
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
