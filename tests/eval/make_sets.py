#!/usr/bin/env python3
"""Build rowcall evaluation sets from three public tool-use benchmarks.

Each set is a directory with two files:

  rows.jsonl     one JSON object a line, each a valid body of `POST /api/directory`
                 (type "static", target "", auth "public", risk "read")
  queries.jsonl  {"q": "<request as the source gives it>", "gold": ["KEY", ...]}

Usage
-----
  python3 make_sets.py --src DIR --out DIR      # read local copies of the three repositories
  python3 make_sets.py --download --out DIR     # fetch the files from GitHub at the pinned commits

With --src, each repository is looked up under DIR as `<owner>+<name>`, `<owner>/<name>`,
`<owner>__<name>` or `<name>`; it may be a plain checkout (a work tree) or a git directory
(bare, or `<that>/repo`, or `<that>/.git`). A git directory is read at the pinned commit below;
a work tree is read as it is (a warning is printed if its `.git` says another commit).
--download reads https://raw.githubusercontent.com/<owner>/<name>/<commit>/<path> and lists
API-Bank's folders with the GitHub trees API (about a dozen unauthenticated calls).

Only the Python 3.11 standard library is used (and the `git` command for git directories).

Sources, pinned commits and licences
------------------------------------
  toolalpaca  github.com/tangqiaoyu/ToolAlpaca @ 189069998d64a7baf1b4a1c3c4b2e75eb9d05532
              data/eval_real.json, data/eval_simulated.json. Apache-2.0 (repository LICENSE).
              Paper: Tang et al. 2023, "ToolAlpaca: Generalized Tool Learning for Language
              Models with 3000 Simulated Cases", arXiv:2306.05301.
  apibench    github.com/ShishirPatil/gorilla @ 6ea57973c7a6097fd7c5915698c54c17c5b1b6c8
              data/api/{huggingface,torchhub,tensorflowhub}_api.jsonl and
              data/apibench/{huggingface,torchhub,tensorflow}_eval.json. Apache-2.0
              (repository LICENSE). Paper: Patil et al. 2023, "Gorilla: Large Language Model
              Connected with Massive APIs", arXiv:2305.15334. The API documentation is
              compiled from Hugging Face, PyTorch Hub and TensorFlow Hub model cards.
  apibank     github.com/AlibabaResearch/DAMO-ConvAI @ 483554eae102996f5ec1f4feab4e78ef29c2a394
              api-bank/apis/*.py, api-bank/lv3_apis/*.py, api-bank/data/all_apis.csv,
              api-bank/lv1-lv2-samples/{level-1-given-desc,level-2-toolsearcher}/*.jsonl.
              Apache-2.0 (api-bank/LICENSE; the DAMO-ConvAI root LICENSE is MIT).
              Paper: Li et al. 2023, "API-Bank: A Comprehensive Benchmark for
              Tool-Augmented LLMs", EMNLP 2023, arXiv:2304.08244.

The generated files are derived data of those works and keep their licences.

Conversion choices common to all sets
-------------------------------------
* Keys: the source's tool/API name, upper-cased, every run of non-alphanumerics -> "_",
  leading/trailing "_" removed, "_" prepended if it would start with a digit, cut to 64
  characters; a clash gets "_2", "_3", ... (in catalogue order). For code identifiers
  (ToolAlpaca functions, API-Bank classes) camelCase boundaries also become "_"
  (getRandomCat -> GET_RANDOM_CAT); model ids (APIBench) are not split.
* content: "# WHAT: <description>" (newlines and runs of whitespace collapsed to one space),
  "# ARGS: <argument names>" when there are arguments, then where the source has one,
  "# RETURNS: ..." (ToolAlpaca, API-Bank) or "# EXAMPLE: <api_call>" (APIBench); a blank
  line; a small JSON payload naming the tool. Only rowcall's docstring fields are used (an
  unknown "# NAME:" line would end rowcall's docstring). No words are added.
* args_schema: {"type": "object", "properties": {name: {"type", "description"}}} plus
  "required" where the source marks arguments as required. Source types are mapped to JSON
  Schema types (str -> string, int -> integer, Array[...] -> array, ...); an unknown type
  becomes "string".
* category: the source's grouping, cut to 64 bytes (rowcall's limit).
* Queries: one per source request, whitespace-trimmed and otherwise verbatim. Identical
  request texts are merged (gold = union). A set with more than --max-queries requests is
  sampled with random.Random(--seed).sample and written in source order.
* Gold keys always exist in rows.jsonl; a request whose gold cannot be resolved is dropped
  and counted in the summary printed at the end.

Per-set choices
---------------
toolalpaca
* Rows: every function in Function_Description of the 21 evaluation APIs (11 real,
  10 simulated). The "components" entry (a list of output schemas, not a function) is
  skipped. A function with an empty description gets its API's Description as WHAT.
  Description = text before "Parameters:"; arguments from the Parameters JSON: a leading
  "Required." goes to "required", the type word to "type", the rest is the description;
  RETURNS = the text after "Output:" up to " - Format:".
* category = the API's Name (e.g. "Nager.Date"); payload {"api": Name, "function": name}.
* Queries: every Instruction, gold = the distinct Actions of its Golden_Answers.
  "getDetails" (ToolAlpaca's ask-the-user pseudo action) is dropped from gold; an
  "[Optional]" prefix is removed. AviationAPI's gold names six functions its
  Function_Description lacks (its OpenAPI document is truncated in the source); requests
  whose gold names such a missing function are dropped.
apibench
* Rows: data/api/*_api.jsonl of the three hubs, one row per distinct API, first occurrence
  kept: Hugging Face by api_name (the model id), TensorFlow Hub by the tfhub.dev model URL
  in api_call (else api_call), Torch Hub by api_call (whitespace removed). TensorFlow Hub's
  file repeats the same model many times (696 lines, 58 models); the duplicates would be
  indistinguishable near-copies, so they are collapsed.
* WHAT = description; EXAMPLE = api_call; category = domain; key from api_name (Hugging
  Face, Torch Hub) or from the model path of the tfhub.dev URL (TensorFlow Hub, whose
  api_name is often a placeholder such as "model_id"); payload {"framework", "api_call"}.
  api_arguments become arguments when they name identifiers: dict keys (description = the
  value as given, type from the value's JSON type), list items that are identifiers or
  "name: text" pairs, {"name", "type", "description"} items; code lines, "N/A" and free
  text are not arguments.
* Queries: the *_eval.json questions. The source's "code" field is
  "###Instruction: <question>\n###Output: <answer with api_call and code>"; only the
  question is kept (the "###Instruction:" prefix and everything from "###Output" on are
  stripped; 5 questions have no "###Output" part). Gold = the row of the API identity of
  the question's api_data.
apibank
* Rows: every API class in api-bank/apis/*.py, then lv3_apis/*.py, then the rows of
  data/all_apis.csv (its api_info column) whose class is not already present. Read with
  ast (nothing is imported or run). WHAT = description; arguments from input_parameters;
  RETURNS = "name: description" of output_parameters joined by "; ". ToolSearcher (the
  benchmark's tool-retrieval meta API, i.e. the job of the resolver under test) is left out.
* category: the "application scenario" column (应用场景) of all_apis.csv, rendered in
  English by the fixed table SCENARIOS below; classes not in the CSV get "General".
* Queries: from every dialogue file, one request per run of User turns that is followed by
  a call of an API not called earlier in that dialogue: q = the User turns since the
  previous API call, joined with a space; gold = the new APIs called before the next User
  turn (see _apibank_requests). GetUserToken and ToolSearcher calls are ignored throughout:
  GetUserToken is an authentication step the user never asks for, so it is never gold (it
  stays a row). So a level-1 dialogue gives one request; a level-2 dialogue gives one per
  task it contains.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import os
import random
import re
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------

TOOLALPACA = ("tangqiaoyu", "ToolAlpaca", "189069998d64a7baf1b4a1c3c4b2e75eb9d05532")
GORILLA = ("ShishirPatil", "gorilla", "6ea57973c7a6097fd7c5915698c54c17c5b1b6c8")
DAMO = ("AlibabaResearch", "DAMO-ConvAI", "483554eae102996f5ec1f4feab4e78ef29c2a394")

# API-Bank's application scenarios (all_apis.csv, column 应用场景) in English.
SCENARIOS = {
    "账户管理": "Account Management",
    "日程安排和管理": "Schedule Management",
    "信息查询和处理": "Information Query and Processing",
    "旅游出行": "Travel",
    "财务管理": "Financial Management",
    "健康管理": "Health Management",
    "智能家居控制": "Smart Home Control",
    "娱乐消遣": "Entertainment",
    "学习科研相关": "Study and Research",
    "工作相关": "Work",
    "钉钉": "DingTalk",
}


class Repo:
    """Read-only access to one repository at one commit: a work tree, a git dir, or GitHub."""

    def __init__(self, owner: str, name: str, commit: str, src: Path | None, download: bool):
        self.owner, self.name, self.commit = owner, name, commit
        self.worktree: Path | None = None
        self.gitdir: Path | None = None
        if download:
            return
        assert src is not None
        for cand in (f"{owner}+{name}", f"{owner}/{name}", f"{owner}__{name}", name):
            base = src / cand
            if not base.is_dir():
                continue
            for gd in (base / "repo", base / ".git", base):
                if (gd / "HEAD").is_file() and (gd / "objects").is_dir():
                    if gd.name == ".git":  # a normal checkout: read the work tree
                        self.worktree = base
                        head = self._git(gd, "rev-parse", "HEAD").strip()
                        if head != commit:
                            print(f"warning: {base} is at {head}, not the pinned {commit}",
                                  file=sys.stderr)
                    else:
                        self.gitdir = gd
                        self._git(gd, "cat-file", "-e", f"{commit}^{{commit}}")
                    return
            self.worktree = base
            return
        raise SystemExit(f"{owner}/{name}: not found under {src}")

    @staticmethod
    def _git(gitdir: Path, *args: str, binary: bool = False):
        try:
            out = subprocess.run(["git", f"--git-dir={gitdir}", *args], check=True,
                                 capture_output=True).stdout
        except subprocess.CalledProcessError as e:
            raise SystemExit(f"git {' '.join(args)} in {gitdir}: {e.stderr.decode().strip()}")
        return out if binary else out.decode()

    def read(self, path: str) -> str:
        if self.worktree is not None:
            return (self.worktree / path).read_text(encoding="utf-8")
        if self.gitdir is not None:
            return self._git(self.gitdir, "show", f"{self.commit}:{path}", binary=True).decode()
        url = f"https://raw.githubusercontent.com/{self.owner}/{self.name}/{self.commit}/{path}"
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.read().decode("utf-8")

    def list(self, folder: str, suffix: str) -> list[str]:
        """Paths of the files directly in `folder` whose names end with `suffix`, sorted."""
        folder = folder.rstrip("/")
        if self.worktree is not None:
            names = [p.name for p in (self.worktree / folder).iterdir() if p.is_file()]
            paths = [f"{folder}/{n}" for n in names]
        elif self.gitdir is not None:
            out = self._git(self.gitdir, "ls-tree", "--name-only", self.commit, f"{folder}/")
            paths = out.splitlines()
        else:
            paths = self._github_list(folder)
        return sorted(p for p in paths if p.endswith(suffix))

    def _github_list(self, folder: str) -> list[str]:
        api = f"https://api.github.com/repos/{self.owner}/{self.name}/git/trees/"
        sha, prefix = self.commit, []
        for part in folder.split("/"):
            tree = _get_json(api + sha)
            sha = next(e["sha"] for e in tree["tree"] if e["path"] == part and e["type"] == "tree")
            prefix.append(part)
        tree = _get_json(api + sha)
        return ["/".join(prefix + [e["path"]]) for e in tree["tree"] if e["type"] == "blob"]


def _get_json(url: str):
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.github+json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


# ---------------------------------------------------------------------------------------------
# Row building
# ---------------------------------------------------------------------------------------------

JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object"}
TYPE_ALIASES = {
    "str": "string", "string": "string", "text": "string",
    "int": "integer", "integer": "integer",
    "float": "number", "number": "number", "double": "number",
    "bool": "boolean", "boolean": "boolean",
    "list": "array", "array": "array", "tuple": "array",
    "dict": "object", "object": "object",
}
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")


def json_type(name) -> str:
    t = str(name).strip().lower()
    if t.startswith("array[") or t.startswith("list["):
        return "array"
    if t.startswith("object{") or t.startswith("dict["):
        return "object"
    return TYPE_ALIASES.get(t, "string")


def one_line(text) -> str:
    return " ".join(str(text).split())


@dataclass
class Arg:
    name: str
    type: str = "string"
    description: str = ""
    required: bool = False


@dataclass
class Row:
    name: str            # source name the key is derived from
    category: str
    what: str
    args: list[Arg] = field(default_factory=list)
    returns: str = ""
    example: str = ""
    payload: dict = field(default_factory=dict)
    key: str = ""

    def body(self) -> dict:
        lines = [f"# WHAT: {one_line(self.what)}"]
        if self.args:
            lines.append("# ARGS: " + ", ".join(a.name for a in self.args))
        if self.returns:
            lines.append(f"# RETURNS: {one_line(self.returns)}")
        if self.example:
            lines.append(f"# EXAMPLE: {one_line(self.example)}")
        content = "\n".join(lines) + "\n\n" + json.dumps(self.payload, ensure_ascii=False) + "\n"
        schema: dict = {"type": "object", "properties": {
            a.name: {"type": a.type, "description": one_line(a.description)} for a in self.args
        }}
        required = [a.name for a in self.args if a.required]
        if required:
            schema["required"] = required
        return {
            "key": self.key, "type": "static", "target": "",
            "category": cut_bytes(one_line(self.category), 64),
            "content": content, "auth": "public", "risk": "read", "args_schema": schema,
        }


def cut_bytes(text: str, limit: int) -> str:
    data = text.encode("utf-8")[:limit]
    return data.decode("utf-8", errors="ignore").rstrip()


def key_of(name: str, split_camel: bool) -> str:
    s = name
    if split_camel:
        s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", s)
        s = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", s)
    s = re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_").upper() or "_"
    if s[0].isdigit():
        s = "_" + s
    return s[:64].rstrip("_") or "_"


def assign_keys(rows: list[Row], split_camel: bool) -> None:
    used: set[str] = set()
    for row in rows:
        base = key_of(row.name, split_camel)
        key, n = base, 1
        while key in used:
            n += 1
            suffix = f"_{n}"
            key = base[: 64 - len(suffix)] + suffix
        used.add(key)
        row.key = key


def dedupe_args(args: list[Arg]) -> list[Arg]:
    seen, out = set(), []
    for a in args:
        if a.name not in seen:
            seen.add(a.name)
            out.append(a)
    return out


@dataclass
class Query:
    q: str
    gold: list[str]


def merge_queries(queries: list[Query]) -> list[Query]:
    """Drops empty requests and merges identical request texts (gold = union, in order)."""
    by_text: dict[str, Query] = {}
    for qu in queries:
        text = qu.q.strip()
        if not text or not qu.gold:
            continue
        if text in by_text:
            by_text[text].gold += [g for g in qu.gold if g not in by_text[text].gold]
        else:
            by_text[text] = Query(text, list(dict.fromkeys(qu.gold)))
    return list(by_text.values())


def sample(queries: list[Query], limit: int, seed: int) -> list[Query]:
    if len(queries) <= limit:
        return queries
    picked = sorted(random.Random(seed).sample(range(len(queries)), limit))
    return [queries[i] for i in picked]


# ---------------------------------------------------------------------------------------------
# ToolAlpaca
# ---------------------------------------------------------------------------------------------

def _toolalpaca_param(spec: str) -> tuple[bool, str, str]:
    """'Required. string. One of: [a, b]. Text' -> (True, 'string', 'One of: [a, b]. Text')."""
    s = spec.strip()
    required = s.startswith("Required.")
    if required:
        s = s[len("Required."):].lstrip()
    # the type word runs to the first '.' outside brackets/braces
    depth, end = 0, None
    for i, ch in enumerate(s):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "." and depth == 0:
            end = i
            break
    if end is not None and re.fullmatch(r"[A-Za-z]+(\[.*\]|\{.*\})?", s[:end], re.S):
        return required, json_type(s[:end]), s[end + 1:].strip()
    return required, "string", s


def _toolalpaca_function(text: str) -> tuple[str, list[Arg], str]:
    m = re.search(r"(?:^|\n)Parameters:", text)
    if not m:
        return text.strip(), [], ""
    desc, rest = text[: m.start()].strip(), text[m.end():]
    params_text, _, output = rest.partition("\nOutput:")
    args: list[Arg] = []
    try:
        params = json.loads(params_text.strip() or "{}")
    except json.JSONDecodeError:
        params = {}
    for name, spec in params.items():
        required, typ, d = _toolalpaca_param(str(spec))
        args.append(Arg(name, typ, d, required))
    returns = output.split("\n - Format:")[0].strip()
    return desc, args, returns


def build_toolalpaca(repo: Repo, stats: dict) -> tuple[list[Row], list[Query]]:
    apis = []
    for path in ("data/eval_real.json", "data/eval_simulated.json"):
        apis += json.loads(repo.read(path))
    rows: list[Row] = []
    by_fn: dict[tuple[str, str], Row] = {}
    for api in apis:
        for fn, text in api["Function_Description"].items():
            if fn == "components" or not str(text).strip():
                continue
            desc, args, returns = _toolalpaca_function(str(text))
            row = Row(name=fn, category=api["Name"], what=desc or api["Description"],
                      args=dedupe_args(args), returns=returns,
                      payload={"api": api["Name"], "function": fn})
            rows.append(row)
            by_fn[(api["Name"], fn)] = row
    assign_keys(rows, split_camel=True)

    queries, dropped = [], 0
    for api in apis:
        for text, answer in zip(api["Instructions"], api["Golden_Answers"]):
            names = []
            for step in answer:
                action = re.sub(r"^\[Optional\]\s*", "", step["Action"]).strip()
                if action != "getDetails" and action not in names:
                    names.append(action)
            if not names or any((api["Name"], n) not in by_fn for n in names):
                dropped += 1
                continue
            queries.append(Query(text, [by_fn[(api["Name"], n)].key for n in names]))
    stats["dropped (gold function not in the API's Function_Description)"] = dropped
    return rows, queries


# ---------------------------------------------------------------------------------------------
# Gorilla APIBench
# ---------------------------------------------------------------------------------------------

HUBS = [  # (api file, eval file)
    ("huggingface", "huggingface"),
    ("torchhub", "torchhub"),
    ("tensorflowhub", "tensorflow"),
]
TFHUB_URL = re.compile(r"https?://tfhub\.dev/[^'\"\s),]+")


def _apibench_identity(hub: str, rec: dict) -> str:
    if hub == "huggingface":
        return "hf:" + str(rec["api_name"]).strip()
    call = str(rec["api_call"])
    if hub == "tensorflowhub":
        m = TFHUB_URL.search(call)
        if m:
            return "tf:" + m.group(0).rstrip("/")
    return f"{hub}:" + re.sub(r"\s+", "", call)


def _apibench_args(raw) -> list[Arg]:
    args: list[Arg] = []

    def add(name, value=None, typ=None, desc=None):
        name = str(name).strip()
        if not IDENT.match(name) or name.upper() == "N/A":
            return
        if desc is None:
            desc = "" if value is None else (value if isinstance(value, str)
                                              else json.dumps(value, ensure_ascii=False))
        if typ is None:
            typ = {bool: "boolean", int: "integer", float: "number", list: "array",
                   dict: "object"}.get(type(value), "string")
        args.append(Arg(name, json_type(typ), desc))

    if isinstance(raw, dict):
        for k, v in raw.items():
            add(k, v)
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict) and "name" in item:
                add(item["name"], typ=item.get("type", "string"),
                    desc=str(item.get("description", "")))
            elif isinstance(item, dict):
                for k, v in item.items():
                    add(k, v)
            elif isinstance(item, str):
                name, sep, desc = item.partition(":")
                if sep and IDENT.match(name.strip()) and "=" not in name and "(" not in name:
                    add(name, desc=desc.strip())
                elif IDENT.match(item.strip()):
                    add(item)
    elif isinstance(raw, str) and IDENT.match(raw.strip()):
        add(raw)
    return dedupe_args(args)


def _apibench_question(code: str) -> str | None:
    m = re.match(r"\s*###\s*Instruction:\s*(.*?)\s*(?:###\s*Output|$)", code, re.S)
    return m.group(1).strip() if m else None


def build_apibench(repo: Repo, stats: dict) -> tuple[list[Row], list[Query]]:
    rows: list[Row] = []
    by_id: dict[str, Row] = {}
    for hub, _ in HUBS:
        text = repo.read(f"data/api/{hub}_api.jsonl")
        for line in text.splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            ident = _apibench_identity(hub, rec)
            if ident in by_id:
                continue
            name = str(rec["api_name"])
            if hub == "tensorflowhub" and ident.startswith("tf:"):
                name = ident.split("tfhub.dev/", 1)[1]
            row = Row(name=name, category=str(rec["domain"]), what=str(rec["description"]),
                      args=_apibench_args(rec.get("api_arguments")),
                      example=str(rec["api_call"]),
                      payload={"framework": rec["framework"], "api_call": rec["api_call"]})
            rows.append(row)
            by_id[ident] = row
    assign_keys(rows, split_camel=False)

    queries, no_q, no_gold = [], 0, 0
    for hub, ev in HUBS:
        for line in repo.read(f"data/apibench/{ev}_eval.json").splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            q = _apibench_question(rec["code"])
            row = by_id.get(_apibench_identity(hub, rec["api_data"]))
            if q is None:
                no_q += 1
            elif row is None:
                no_gold += 1
            else:
                queries.append(Query(q, [row.key]))
    stats["dropped (no ###Instruction/###Output question)"] = no_q
    stats["dropped (gold API not in data/api)"] = no_gold
    return rows, queries


# ---------------------------------------------------------------------------------------------
# API-Bank
# ---------------------------------------------------------------------------------------------

NOT_GOLD = {"GetUserToken", "ToolSearcher"}
NOT_ROWS = {"ToolSearcher"}


def _apibank_attrs(assignments: list[ast.stmt]) -> dict:
    out = {}
    for node in assignments:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def _apibank_row(name: str, attrs: dict, category: str) -> Row | None:
    if not isinstance(attrs.get("description"), str):
        return None
    args = []
    for arg, spec in (attrs.get("input_parameters") or {}).items():
        spec = spec if isinstance(spec, dict) else {}
        args.append(Arg(arg, json_type(spec.get("type", "string")),
                        str(spec.get("description", ""))))
    outs = [f"{k}: {one_line(v.get('description', ''))}" if isinstance(v, dict) else k
            for k, v in (attrs.get("output_parameters") or {}).items()]
    return Row(name=name, category=category, what=attrs["description"], args=args,
               returns="; ".join(outs), payload={"tool": name})


def _apibank_requests(turns: list[dict]) -> list[tuple[list[str], list[str]]]:
    """(User turns, gold API names) for each request of one dialogue.

    The User turns since the previous API call (GetUserToken and ToolSearcher do not count)
    form a request when the calls that follow them, up to the next User turn, include an API
    not called earlier in the dialogue; those new APIs are its gold. Turns followed only by
    repeat calls (a second sum for Calculator, ...) are not a request.
    """
    requests: list[tuple[list[str], list[str]]] = []
    said: list[str] = []
    called: set[str] = set()
    current: tuple[list[str], list[str]] | None = None
    for t in turns:
        if t["role"] == "User":
            current = None
            said.append(t["text"])
        elif t["role"] == "API" and t["api_name"] not in NOT_GOLD:
            if said:  # the first call after new User turns consumes them
                current = (said, [])
                requests.append(current)
                said = []
            name = t["api_name"]
            if current is not None and name not in called:
                current[1].append(name)
            called.add(name)
    return [(s, g) for s, g in requests if g]


def build_apibank(repo: Repo, stats: dict) -> tuple[list[Row], list[Query]]:
    table = list(csv.DictReader(io.StringIO(repo.read("api-bank/data/all_apis.csv"))))
    scenario = {r["类名"].strip(): SCENARIOS.get(r["应用场景"].strip(), "General")
                for r in table}

    rows: list[Row] = []
    by_name: dict[str, Row] = {}

    def add(name: str, attrs: dict):
        if name in by_name or name in NOT_ROWS:
            return
        row = _apibank_row(name, attrs, scenario.get(name, "General"))
        if row is not None:
            rows.append(row)
            by_name[name] = row

    for folder in ("api-bank/apis", "api-bank/lv3_apis"):
        for path in repo.list(folder, ".py"):
            tree = ast.parse(repo.read(path))
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and node.name != "API":
                    add(node.name, _apibank_attrs(node.body))
    for r in table:
        try:
            add(r["类名"].strip(), _apibank_attrs(ast.parse(r["api_info"]).body))
        except SyntaxError:
            continue
    assign_keys(rows, split_camel=True)

    queries, dropped = [], 0
    for folder in ("level-1-given-desc", "level-2-toolsearcher"):
        for path in repo.list(f"api-bank/lv1-lv2-samples/{folder}", ".jsonl"):
            turns = [json.loads(x) for x in repo.read(path).splitlines() if x.strip()]
            for said, gold in _apibank_requests(turns):
                if any(g not in by_name for g in gold):
                    dropped += 1
                    continue
                queries.append(Query(" ".join(s.strip() for s in said),
                                     [by_name[g].key for g in gold]))
    stats["dropped requests (API without a row)"] = dropped
    return rows, queries


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

SETS = [
    ("toolalpaca", TOOLALPACA, build_toolalpaca),
    ("apibench", GORILLA, build_apibench),
    ("apibank", DAMO, build_apibank),
]


def write_jsonl(path: Path, objs) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for o in objs:
            f.write(json.dumps(o, ensure_ascii=False) + "\n")


def check(rows: list[dict], queries: list[Query]) -> None:
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)), "duplicate keys"
    assert all(re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", k) for k in keys), "bad key"
    assert all(len(r["content"].encode()) <= 64 * 1024 for r in rows), "content too long"
    known = set(keys)
    assert all(g in known for qu in queries for g in qu.gold), "gold key without a row"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--src", type=Path, help="folder holding the three repositories")
    where.add_argument("--download", action="store_true", help="fetch from GitHub")
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--only", nargs="*", choices=[s[0] for s in SETS], help="sets to build")
    ap.add_argument("--max-queries", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    opts = ap.parse_args()

    for name, (owner, repo_name, commit), build in SETS:
        if opts.only and name not in opts.only:
            continue
        repo = Repo(owner, repo_name, commit, opts.src, opts.download)
        stats: dict = {}
        rows, queries = build(repo, stats)
        merged = merge_queries(queries)
        stats["requests merged (identical text)"] = len(queries) - len(merged)
        stats["requests available"] = len(merged)
        picked = sample(merged, opts.max_queries, opts.seed)
        bodies = [r.body() for r in rows]
        check(bodies, picked)
        write_jsonl(opts.out / name / "rows.jsonl", bodies)
        write_jsonl(opts.out / name / "queries.jsonl",
                    ({"q": qu.q, "gold": qu.gold} for qu in picked))
        gold = sum(len(qu.gold) for qu in picked) / max(len(picked), 1)
        print(f"{name}: {len(bodies)} rows, {len(picked)} queries, {gold:.2f} gold/query")
        for k, v in stats.items():
            print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
