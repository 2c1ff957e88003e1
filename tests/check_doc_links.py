#!/usr/bin/env python3
"""Dead relative links in markdown files.

    tests/check_doc_links.py ROOT [ROOT...]

A ROOT is a directory (every .md file under it, README.md at its top
included) or one .md file. In each file, every relative markdown link
`[x](path)`, `[x](path#anchor)` and `[x](#anchor)` (images too) must
resolve: the path exists, relative to the linking file, and the anchor is
a heading of the target .md file, slugged as GitHub does (lowercase;
punctuation other than - and _ dropped; spaces to -; a repeated slug gets
-1, -2, ...) or an explicit <a name="..."> / id="...". Links with a scheme
(http:, https:, mailto:, ...) and links inside fenced code blocks or
inline code spans are not checked.

Prints each dead link as `file:line: link: why` and exits 1 if there is
one; 0 when every link resolves; 2 on a bad command line.
"""
import os
import re
import sys
import urllib.parse

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*?(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SKIP_DIRS = {".git", "node_modules", "__pycache__"}


def lines_outside_fences(text):
    """(line number, line) of every line not inside a fenced code block."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)[0] * len(m.group(1))
                continue
            yield n, line
        elif m and m.group(1).startswith(fence) and line.strip() == m.group(1):
            fence = None


def slug(heading):
    """GitHub's anchor for a heading's text."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    t = re.sub(r"<[^>]+>", "", t)                           # inline HTML
    t = t.replace("`", "")
    t = re.sub(r"(\*+)(.+?)\1", r"\2", t)                  # emphasis markers
    t = t.strip().lower()
    t = "".join(c for c in t if c.isalnum() or c in "-_ ")
    return t.replace(" ", "-")


_anchor_cache = {}


def anchors(path):
    """Every anchor a .md file defines."""
    if path in _anchor_cache:
        return _anchor_cache[path]
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    seen = {}
    found = set()
    for _, line in lines_outside_fences(text):
        for a in HTML_ANCHOR.findall(line):
            found.add(a)
        m = HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        if s in seen:
            seen[s] += 1
            found.add("%s-%d" % (s, seen[s]))
        else:
            seen[s] = 0
            found.add(s)
    _anchor_cache[path] = found
    return found


def check_file(path, shown):
    """Dead links of one file, as (line, link, why)."""
    dead = []
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    base = os.path.dirname(path)
    for n, line in lines_outside_fences(text):
        line = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        for m in LINK.finditer(line):
            link = m.group(2)
            if not link or SCHEME.match(link):
                continue
            target, _, anchor = link.partition("#")
            target = urllib.parse.unquote(target)
            anchor = urllib.parse.unquote(anchor)
            dest = os.path.normpath(os.path.join(base, target)) if target else path
            if not os.path.exists(dest):
                dead.append((n, link, "%s does not exist" % os.path.relpath(dest)))
                continue
            if not anchor:
                continue
            if os.path.isdir(dest) or not dest.endswith(".md"):
                dead.append((n, link, "an anchor on %s, which is not a markdown file"
                             % os.path.relpath(dest)))
                continue
            if anchor not in anchors(dest):
                dead.append((n, link, "no heading of %s has the anchor #%s"
                             % (os.path.relpath(dest), anchor)))
    return [(shown, n, link, why) for n, link, why in dead]


def md_files(root):
    if os.path.isfile(root):
        return [root]
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
        out.extend(os.path.join(d, f) for f in sorted(files) if f.endswith(".md"))
    return out


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        sys.stdout.write(__doc__)
        return 0 if len(argv) >= 2 else 2
    dead = []
    count = 0
    for root in argv[1:]:
        if not os.path.exists(root):
            print("%s: no such file or directory" % root, file=sys.stderr)
            return 2
        for path in md_files(root):
            count += 1
            dead.extend(check_file(path, path))
    for shown, n, link, why in dead:
        print("%s:%d: %s: %s" % (shown, n, link, why))
    if dead:
        print("%d dead link(s) in %d markdown file(s)" % (len(dead), count))
        return 1
    print("%d markdown file(s), every relative link resolves" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
