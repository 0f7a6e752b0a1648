#!/usr/bin/env python3
"""Lists every function longer than a limit in src/ (default 80 lines), longest first.

    scripts/long_functions.py                 # list them: file:line, lines, name
    scripts/long_functions.py --check FILE    # also fail (exit 1) on one that FILE does not list
                                              # at its length or more (FILE: "path name lines" lines)

A function is counted from the line of its name to its closing brace, lambdas and local classes
inside it included. The parse is a brace matcher over the code with comments, strings and
character literals blanked: enough for this code base's style, not a C++ parser. The check is a
ratchet: the list holds the long functions there are, so a new one, or one grown longer, is seen.
"""
import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".cpp", ".cu", ".h", ".cuh")
# What may follow a function's closing parenthesis before its body opens.
FUNCTION_TAIL = re.compile(r"\)\s*(?:const|override|final|noexcept|mutable|volatile|&|&&|\s)*"
                           r"(?:->\s*[\w:<>,\s*&]+)?$")
CONSTRUCTOR_INIT = re.compile(r"\)\s*(?:noexcept\s*)?:\s*[\w:]+\s*[({]")
NAME_BEFORE_PAREN = re.compile(r"((?:operator\s*\S+?|~?[A-Za-z_][\w]*)(?:\s*<[^()]*>)?)\s*\($")


def blank_comments_and_strings(text):
    """The text with comments, string and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(header):
    """The function's name when `header` (the code before a '{') ends a function's signature."""
    header = header.strip()
    m = CONSTRUCTOR_INIT.search(header)
    if m:
        header = header[:m.start() + 1]
    elif not FUNCTION_TAIL.search(header):
        return None
    # Match the parenthesis that closes the signature back to the one that opens it.
    depth, k = 0, len(header) - 1
    while k >= 0:
        if header[k] == ")":
            depth += 1
        elif header[k] == "(":
            depth -= 1
            if depth == 0:
                break
        k -= 1
    if k < 0:
        return None
    m = NAME_BEFORE_PAREN.search(header[:k + 1])
    if not m or m.group(1) in ("if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"):
        return None
    qualified = re.search(r"([\w:~]*" + re.escape(m.group(1)) + r")\s*\($", header[:k + 1])
    return qualified.group(1) if qualified else m.group(1)


def functions(path):
    """(name, first line, lines) of each function defined in the file at namespace or class level."""
    with open(path, encoding="utf-8", errors="replace") as f:
        code = blank_comments_and_strings(f.read())
    found = []
    stack = []  # per open brace: "scope" (namespace, class, extern) or "body" (a function or data)
    header_start = 0
    for i, c in enumerate(code):
        if c in ";{}" and stack and stack[-1] == "body":
            if c == "{":
                stack.append("body")
            elif c == "}":
                stack.pop()
                if len(stack) == 0 or stack[-1] != "body":
                    header_start = i + 1
                    if found and found[-1][3] is None:
                        name, line, start, _ = found[-1]
                        found[-1] = (name, line, start, code.count("\n", 0, i) + 1)
            continue
        if c == ";":
            header_start = i + 1
        elif c == "{":
            header = code[header_start:i]
            name = function_name(header)
            if name:
                name_at = header_start + header.find(name.split("::")[-1]) if name.split("::")[-1] in header else i
                found.append((name, code.count("\n", 0, name_at) + 1, i, None))
                stack.append("body")
            elif re.search(r"\b(namespace|class|struct|union)\b", header) or re.search(r'extern\s*$', header) or \
                    not header.strip():
                stack.append("scope")
                header_start = i + 1
            else:
                stack.append("body")  # an initializer, an enum: not a function
                found.append((None, 0, i, None))
        elif c == "}":
            if stack:
                stack.pop()
            header_start = i + 1
    return [(name, line, end - line + 1) for name, line, _, end in found if name and end is not None]


def long_functions(root, limit):
    rows = []
    for dirpath, _, files in os.walk(os.path.join(root, "src")):
        for fn in sorted(files):
            if fn.endswith(SOURCE_SUFFIXES):
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, root)
                rows += [(rel, name, line, lines) for name, line, lines in functions(path) if lines > limit]
    return sorted(rows, key=lambda r: (-r[3], r[0], r[2]))


def read_allowed(path):
    allowed = {}
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if line:
                file, name, lines = line.split()
                allowed[(file, name)] = int(lines)
    return allowed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--check", metavar="FILE", help="fail on a long function FILE does not list at its length or more")
    args = ap.parse_args()
    rows = long_functions(args.root, args.limit)
    for file, name, line, lines in rows:
        print(f"{file}:{line}: {lines} lines: {name}")
    if not args.check:
        return 0
    allowed = read_allowed(args.check)
    new = [r for r in rows if allowed.get((r[0], r[1]), -1) < r[3]]
    for file, name, line, lines in new:
        was = allowed.get((file, name))
        why = f"longer than the {was} lines {args.check} allows" if was else f"not in {args.check}"
        print(f"error: {file}:{line}: {name} is {lines} lines, {why} (split it into named steps)", file=sys.stderr)
    print(f"{len(rows)} functions over {args.limit} lines in src/, {len(new)} new or grown")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
