#!/usr/bin/env python3
"""Checks the book offline, after `mdbook build docs`:

1. every link in the built book (docs/book/*.html) that stays inside it reaches a page that
   exists, and its #anchor an id on that page (mdBook's own ids, so nothing is guessed);
   a relative link that leaves the book is an error (it would break on the published book);
2. every relative link of README.md reaches a file of the repository, and a link into the
   book (docs/src/X.md#anchor) a page and an id of the built book;
3. every alert of deploy/prometheus/alerts.yml has a `runbook_url` annotation naming
   docs/src/<page>.md#<its own name in lower case>, and that heading exists in the book;
4. every `rowcall …` and `rowcall-node …` command written in the book (code blocks and
   inline code) and in README.md names subcommands and flags the commands have, as their
   help says in the generated CLI reference (docs/src/reference/cli.md, which .ci/run
   checks against the binaries with docs/gen.py).

    python3 docs/check.py            # from anywhere; exit code 1 and a list on failure

Python's standard library only; no network.
"""

import html.parser
import os
import re
import sys
import urllib.parse

DOCS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(DOCS)
SRC = os.path.join(DOCS, "src")
BOOK = os.path.join(DOCS, "book")
ALERTS = os.path.join(REPO, "deploy", "prometheus", "alerts.yml")
CLI_MD = os.path.join(SRC, "reference", "cli.md")

errors = []


def error(where, what):
    errors.append(f"{where}: {what}")


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.hrefs = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href") is not None:
            self.hrefs.append(attrs["href"])


def load_book():
    """Every built page (print.html, which renumbers ids, left out) with its ids and links."""
    pages = {}
    for folder, _, files in os.walk(BOOK):
        for name in files:
            if name in ("print.html", "toc.html"):
                pages[os.path.normpath(os.path.join(folder, name))] = Page()
            elif name.endswith(".html"):
                path = os.path.join(folder, name)
                page = Page()
                with open(path, encoding="utf-8") as f:
                    page.feed(f.read())
                pages[os.path.normpath(path)] = page
    return pages


def heading_id(text):
    """The id mdBook gives a heading (mdbook-html's `id_from_content`)."""
    return "".join(
        c if (c.isalnum() or c in "_-") else "-" if c.isspace() else ""
        for c in text.strip().lower()
    )


def check_target(pages, where, target_html, fragment):
    page = pages.get(os.path.normpath(target_html))
    if page is None:
        error(where, f"no page {os.path.relpath(target_html, REPO)} in the built book")
    elif fragment and fragment not in page.ids:
        error(where, f"no heading #{fragment} in {os.path.relpath(target_html, REPO)}")


def check_book_links(pages):
    for path, page in sorted(pages.items()):
        where = os.path.relpath(path, REPO)
        for href in page.hrefs:
            parsed = urllib.parse.urlsplit(href)
            if parsed.scheme or href.startswith("//"):
                continue
            fragment = urllib.parse.unquote(parsed.fragment)
            if not parsed.path:
                if fragment and fragment not in page.ids:
                    error(where, f"no heading #{fragment} on this page")
                continue
            target = os.path.normpath(
                os.path.join(os.path.dirname(path), urllib.parse.unquote(parsed.path))
            )
            if not target.startswith(BOOK + os.sep):
                error(where, f"the link {href} leaves the book")
                continue
            if os.path.isdir(target):
                target = os.path.join(target, "index.html")
            if target.endswith(".html"):
                check_target(pages, where, target, fragment)
            elif not os.path.exists(target):
                error(where, f"the link {href} reaches no file")


def book_page_of(src_md):
    """docs/src/X.md -> docs/book/X.html."""
    rel = os.path.relpath(src_md, SRC)
    return os.path.join(BOOK, os.path.splitext(rel)[0] + ".html")


def check_repo_link(pages, where, base_dir, target):
    parsed = urllib.parse.urlsplit(target)
    if parsed.scheme or target.startswith("#") or target.startswith("//"):
        return
    path = os.path.normpath(os.path.join(base_dir, urllib.parse.unquote(parsed.path)))
    fragment = urllib.parse.unquote(parsed.fragment)
    if path.startswith(SRC + os.sep) and path.endswith(".md"):
        if not os.path.exists(path):
            error(where, f"{target}: no such chapter")
            return
        check_target(pages, where, book_page_of(path), fragment)
    elif not os.path.exists(path):
        error(where, f"{target}: no such file in the repository")


MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def check_readme(pages):
    readme = os.path.join(REPO, "README.md")
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    for n, line in enumerate(text.splitlines(), 1):
        for m in MD_LINK.finditer(line):
            check_repo_link(pages, f"README.md:{n}", REPO, m.group(1))


def check_alerts(pages):
    with open(ALERTS, encoding="utf-8") as f:
        lines = f.read().splitlines()
    rules = []  # (line number, alert name, runbook_url or None)
    for n, line in enumerate(lines, 1):
        m = re.match(r"^\s*- alert:\s*(\S+)\s*$", line)
        if m:
            rules.append([n, m.group(1), None])
            continue
        if re.match(r"^\s*- (record|alert):", line) and rules:
            rules.append([n, None, None])
        m = re.match(r"^\s*runbook_url:\s*\"?([^\"]+?)\"?\s*$", line)
        if m and rules:
            if rules[-1][2] is not None:
                error(f"alerts.yml:{n}", "a second runbook_url in one rule")
            rules[-1][2] = m.group(1)
    alerts = [r for r in rules if r[1]]
    if not alerts:
        error("alerts.yml", "no alerts found: did the file's layout change?")
    for n, name, url in alerts:
        where = f"deploy/prometheus/alerts.yml:{n} ({name})"
        if url is None:
            error(where, "no runbook_url annotation")
            continue
        page, _, fragment = url.partition("#")
        if not page.startswith("docs/src/") or not page.endswith(".md"):
            error(where, f"runbook_url {url} is not docs/src/<page>.md#<heading>")
            continue
        if fragment != heading_id(name):
            error(where, f"runbook_url {url} should end #{heading_id(name)} (its own section)")
        check_repo_link(pages, where, REPO, url)
    return len(alerts)


# --- commands -------------------------------------------------------------------------


def load_cli():
    """From the generated reference: per command path, its subcommands, its flags and which
    of them take a value."""
    with open(CLI_MD, encoding="utf-8") as f:
        text = f.read()
    commands = {}
    for m in re.finditer(r"^## (rowcall[^\n]*)\n\n```text\n(.*?)```", text, re.S | re.M):
        path = tuple(m.group(1).split())
        body = m.group(2)
        flags, valued, subs = set(), set(), set()
        section = None
        for line in body.splitlines():
            if re.match(r"^[A-Z][A-Za-z ]*:$", line):
                section = line[:-1]
                continue
            if section == "Commands":
                s = re.match(r"^  ([a-z][a-z0-9-]*)\s", line + " ")
                if s:
                    subs.add(s.group(1))
            o = re.match(r"^\s+(?:-\w, )?(--[a-z0-9][a-z0-9-]*)(?:[ =](<[^>]+>))?", line)
            if o and section in ("Options", None):
                flags.add(o.group(1))
                if o.group(2):
                    valued.add(o.group(1))
        commands[path] = (subs, flags, valued)
    return commands


COMMAND = re.compile(r"(?:^|(?<=[\s/(=$]))(rowcall(?:-node)?)(?=\s)")
# What may stand before a command: nothing, a prompt, sudo, a shell operator, `$(`, or an
# environment assignment (`VAR=value`, `VAR=$(…)`). Anything else is an argument of
# another command (`cargo build -p rowcall-node`, `install … target/release/rowcall`).
COMMAND_START = re.compile(
    r"^(?:|\$|sudo|exec|nohup|setsid|&&|\|\||\||;|\(|.*\(|[A-Z_][A-Z0-9_]*=\S*|\S*\))$"
)


def starts_command(text, at):
    """Whether the word at `at` (a match of COMMAND) is a command, not an argument."""
    before = text[:at]
    word_start = len(before) - len(before.split()[-1]) if before and not before[-1].isspace() else at
    prefix = text[word_start:at]
    if prefix and not re.fullmatch(r"(?:\S*/)?", prefix):
        return False
    previous = text[:word_start].split()
    return bool(COMMAND_START.match(previous[-1] if previous else ""))
STOPS = {"|", "||", "&&", ";", "&", ">", ">>", "2>&1", "\\"}


def check_command(commands, where, text):
    for m in COMMAND.finditer(text):
        if not starts_command(text, m.start(1)):
            continue
        root = m.group(1)
        tokens = text[m.end():].split()
        path = (root,)
        if path not in commands:
            error(where, f"{root} is missing from the CLI reference")
            return
        seen_positional = False
        i = 0
        while i < len(tokens):
            token = tokens[i].strip("`")
            if token in STOPS or token.startswith("#") or token.startswith(")"):
                break
            closes = token.endswith(")")
            token = token.rstrip(")`")
            subs, flags, valued = commands[path]
            if token.startswith("--"):
                flag = token.split("=", 1)[0]
                if flag not in flags:
                    error(where, f"`{' '.join(path)}` has no flag {flag}")
                elif flag in valued and "=" not in token:
                    i += 1
                    if i < len(tokens) and tokens[i].endswith(")"):
                        break
            elif token.startswith("-"):
                pass
            elif subs and not seen_positional:
                if token in subs:
                    path = (*path, token)
                elif token in ("...", "…"):
                    break
                else:
                    error(where, f"`{' '.join(path)}` has no subcommand {token}")
                    break
            else:
                seen_positional = True
            if closes:
                break
            i += 1


def code_of_markdown(text):
    """(line number, code text) for every code-block line (continuations joined) and
    every inline code span."""
    out, block, n0, pending = [], False, 0, ""
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            block = not block
            continue
        if block:
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                n0 = n0 or n
                continue
            code = re.sub(r"(^|\s)#.*$", "", pending + line)  # a shell comment
            out.append((n0 or n, code.lstrip("$ ")))
            pending, n0 = "", 0
        else:
            for span in re.findall(r"`([^`]+)`", line):
                out.append((n, span))
    return out


def check_commands():
    commands = load_cli()
    checked = 0
    files = [os.path.join(REPO, "README.md")]
    for folder, _, names in os.walk(SRC):
        files += [os.path.join(folder, x) for x in names if x.endswith(".md")]
    for path in sorted(files):
        if os.path.normpath(path) == os.path.normpath(CLI_MD):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for n, code in code_of_markdown(text):
            if COMMAND.search(code):
                checked += sum(starts_command(code, m.start(1)) for m in COMMAND.finditer(code))
                check_command(commands, f"{os.path.relpath(path, REPO)}:{n}", code)
    return checked


def main():
    if not os.path.isdir(BOOK):
        print("docs/book is missing: run `mdbook build docs` first", file=sys.stderr)
        return 2
    pages = load_book()
    check_book_links(pages)
    check_readme(pages)
    alerts = check_alerts(pages)
    commands = check_commands()
    links = sum(len(p.hrefs) for p in pages.values())
    for e in errors:
        print(e)
    print(
        f"docs/check.py: {len(pages)} pages, {links} links, {alerts} alerts with runbooks, "
        f"{commands} commands checked: {len(errors)} problems"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
