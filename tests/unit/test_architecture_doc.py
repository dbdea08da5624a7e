"""docs/architecture.md held to the code, so that the page cannot drift: every path, script,
name, signature, config key and command it names in backticks exists as it says; its
packages table names every module; its steps to add an encoding run as they stand (its two
code blocks, executed); its quoted code is the code; its figure orders are the registry's."""
import ast
import builtins
import dataclasses
import fnmatch
import importlib.util
import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import typer
import yaml
from omegaconf import OmegaConf

from posexp import config as C
from posexp.cli.app import app
from posexp.cli.args import SHORT, SWITCHES, VALUE_FLAGS
from posexp.config.schema import Config
from posexp.data.tasks.base import Task
from posexp.encodings import ENCODINGS
from posexp.encodings.registry import EncodingSpec
from posexp.errors import UsageError
from posexp.report import FIGURES
from posexp.run.setup import build_model
from posexp.scaling import Method
from tests.conftest import TINY, compose_args

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
TEXT = PAGE.read_text()
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.M | re.S)
PROSE = FENCE.sub("", TEXT)
CODE_DIRS = ("posexp", "tests", "scripts")
# What an IDENT=VALUE the page writes in a section sets: a field or attribute of this class.
FIELDS_OF = {"Add an encoding": EncodingSpec, "Add a task": Task,
             "Add a RoPE scaling method": Method}
# Files a run or a report writes (no file of the repository): named in posexp's source.
WRITTEN = (".json", ".jsonl", ".pt", ".tex", ".md", ".csv", ".txt", ".png")
SOURCE = (".py", ".sh", ".yaml", ".toml")


def section(title: str) -> str:
    """The text under ``## title``, up to the next section."""
    start = TEXT.index(f"\n## {title}\n")
    end = TEXT.find("\n## ", start + 1)
    return TEXT[start:end if end != -1 else None]


def code_blocks(text: str, language: str) -> list[str]:
    return [textwrap.dedent(body) for _, lang, body in FENCE.findall(text) if lang == language]


def spans(text: str) -> list[str]:
    """The backticked spans of ``text`` outside its code blocks."""
    return re.findall(r"`([^`\n]+)`", FENCE.sub("", text))


def packages_table() -> list[tuple[list[str], list[str]]]:
    """Each row of the table of packages: (the spans of its path cell, of its other cell)."""
    table = section("The packages").split("\n|---|---|\n")[1]
    rows = [line.strip("|").split(" | ", 1) for line in table.splitlines()
            if line.startswith("|")]
    return [(spans(path), spans(what)) for path, what in rows]


def row_dir(paths: list[str]) -> Path:
    """Where the bare file names of a row live: its path cell's directory."""
    first = ROOT / paths[0]
    return first if paths[0].endswith("/") else first.parent


def is_pathlike(span: str) -> bool:
    return bool(re.fullmatch(r"[\w.*/-]+", span)) and not span.startswith("-") and (
        "/" in span or span.endswith(SOURCE + WRITTEN))


def exists(span: str, where: Path | None) -> bool:
    """Whether the file or directory ``span`` names is there: from the root, or beside the
    other files of its row of the table; NAME is a placeholder for a new file's name."""
    if "NAME" in span and "/" in span:
        return (ROOT / span).parent.is_dir()
    if "/" not in span and span.endswith((*WRITTEN, ".yaml")):
        if "NAME" in span:
            return True  # a file name a run writes for each NAME
        return any(span in p.read_text() for p in (ROOT / "posexp").rglob("*.py"))
    if (ROOT / span).exists():
        return True
    if where is not None:  # in the table: under its row's directory (check*.py: a glob)
        return any(where.rglob(span.rstrip("/")))
    return "/" not in span and any(any((ROOT / d).rglob(span)) for d in CODE_DIRS)


def test_every_path_and_script_the_page_names_exists():
    in_rows = {(s, row_dir(paths)) for paths, what in packages_table() for s in paths + what}
    missing = [s for s, where in in_rows if is_pathlike(s) and not exists(s, where)]
    missing += [s for s in spans(TEXT) if is_pathlike(s) and not exists(s, None)
                and s not in {r for r, _ in in_rows}]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_link_leads_to_a_file_and_heading():
    for target, anchor in re.findall(r"\]\(([^)#\s]+\.md)(?:#([\w-]+))?\)", PROSE):
        page = PAGE.parent / target
        assert page.is_file(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, f"{target}#{anchor}: no such heading"


def test_the_packages_table_names_every_module():
    rows = [(row_dir(paths), paths, what) for paths, what in packages_table()]
    named = {ROOT / p if "/" in p else where / p for where, paths, _ in rows for p in paths}
    encodings = {Path(sys.modules[s.module.__module__].__file__) for s in ENCODINGS.values()}
    left_out = []
    for module in sorted((ROOT / "posexp").rglob("*.py")):
        if module.name in ("__init__.py", "__main__.py") or module in encodings:
            continue  # a package itself; "one module per encoding"
        here = [(where, what) for where, _, what in rows if module.is_relative_to(where)]
        deepest = max(len(where.parts) for where, _ in here)
        if module in named or any(fnmatch.fnmatch(module.name, s) for where, what in here
                                  if len(where.parts) == deepest for s in what):
            continue
        left_out.append(str(module.relative_to(ROOT)))
    assert not left_out, f"the table of packages leaves out {left_out}"


def defined_names() -> dict[str, list[list[str] | None]]:
    """Every name the code defines, imports or spells as a string -> the parameters of each
    callable of that name (a dataclass's fields, a class's __init__'s) or None."""
    found: dict[str, list] = {}

    def params(args: ast.arguments) -> list[str]:
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        return [a.arg for a in every if a.arg not in ("self", "cls")]

    for path in (p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(node.name, []).append(params(node.args))
            elif isinstance(node, ast.ClassDef):
                init = [s for s in node.body if isinstance(s, ast.FunctionDef)
                        and s.name == "__init__"]
                fields = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                          and isinstance(s.target, ast.Name)]
                found.setdefault(node.name, []).append(params(init[0].args) if init else fields)
                for name in fields:
                    found.setdefault(name, []).append(None)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                found.setdefault(node.id, []).append(None)
            elif isinstance(node, ast.alias):
                found.setdefault((node.asname or node.name).split(".")[-1], []).append(None)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value.isidentifier():  # a registry's entry: Figure("training", ...)
                found.setdefault(node.value, []).append(None)
    return found


def known_words() -> set[str]:
    """Names that are no definition of the code: Python's own, posexp's modules, markers."""
    modules = {p.stem for p in (ROOT / "posexp").rglob("*.py")}
    markers = set(re.findall(r'"(\w+):', re.search(r"markers = \[(.*?)\]",
                                                    (ROOT / "pyproject.toml").read_text(),
                                                    re.S).group(1)))
    return set(dir(builtins)) | modules | markers


def test_every_name_and_signature_the_page_gives_is_the_codes():
    """`name`, `name(a, b)`: the code defines the name, and (with arguments) one callable of
    that name takes them first, in that order."""
    defined, words = defined_names(), known_words()
    wrong = []
    for span in set(spans(TEXT)):
        call = re.fullmatch(r"([A-Za-z_]\w*)(?:\(([\w, ]*)\))?", span)
        dotted = re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", span)
        if call:
            name, args = call.groups()
            want = [a.strip() for a in args.split(",")] if args else []
            if name not in defined and name not in words:
                wrong.append(f"{span}: not defined")
            elif want and not any(p is not None and p[:len(want)] == want
                                  for p in defined.get(name, [])):
                wrong.append(f"{span}: takes {[p for p in defined[name] if p]}")
        elif dotted and not is_pathlike(span) and \
                span.split(".")[0] not in Config.__dataclass_fields__:
            wrong += [f"{span}: {part} not defined" for part in span.split(".")
                      if part not in defined and part not in words]
    assert not wrong, wrong


def test_every_config_key_the_page_names_is_in_the_schema():
    C.register()
    composed = compose_args(TINY)  # every group's keys, as a run's config holds them
    keys = [s.split("=")[0] for s in spans(TEXT)
            if re.fullmatch(r"[a-z_]+(\.[a-z_]+)+(=\S*)?", s) and not is_pathlike(s)
            and s.split(".")[0] in Config.__dataclass_fields__]
    assert "model.tie_weights" in keys  # the tying policy: the model's, not the encoding's
    missing = [k for k in keys if OmegaConf.select(composed, k, default="absent") == "absent"]
    assert not missing, f"no such config keys: {missing}"


def test_every_keyword_the_steps_set_is_a_field_of_what_they_build():
    """`IDENT=VALUE` in a section sets a field (or class attribute) of what its step builds:
    `tie_weights=False` is no EncodingSpec's."""
    literal = re.compile(r"([A-Za-z_]\w*) ?= ?(True|False|None|-?\d[\d.]*|\"[^\"]*\")")
    titles = re.findall(r"^## (.+)$", TEXT, re.M)
    for title in titles:
        for span in spans(section(title)):
            if not (m := literal.fullmatch(span)):
                continue
            assert title in FIELDS_OF, f"{span} in '{title}': say what it sets in FIELDS_OF"
            cls = FIELDS_OF[title]
            fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(
                cls) else {n for k in cls.__mro__ for n in vars(k).get("__annotations__", {})}
            assert m[1] in fields or hasattr(cls, m[1]), f"{cls.__name__} has no {m[1]}: {span}"


def test_every_command_and_option_the_page_names_exists():
    commands = typer.main.get_command(app).commands
    options = {o for c in commands.values() for p in c.params for o in p.opts}
    hydra_flags = {*VALUE_FLAGS, *SWITCHES, *SHORT.values()}
    for span in spans(TEXT):
        words = span.split()
        if words[0] == "posexp":
            assert words[1] in commands, f"{span}: posexp has no command {words[1]}"
            own = {o for p in commands[words[1]].params for o in p.opts}
            assert all(w in own for w in words[2:] if w.startswith("--")), span
        elif re.fullmatch(r"--[\w-]+", span):
            assert span in options | hydra_flags, f"{span}: no command takes it"


@pytest.fixture
def encodings_as_they_were():
    """The encoding registry as it was, after a test that adds to it."""
    saved = dict(ENCODINGS)
    yield
    ENCODINGS.clear()
    ENCODINGS.update(saved)


def named_file(block: str) -> str:
    """The file a code block's first line names (``# posexp/encodings/NAME.py``)."""
    first = block.splitlines()[0]
    assert first.startswith("# "), f"a code block's first line names its file: {first!r}"
    return first[2:].strip()


def test_the_steps_to_add_an_encoding_run_as_the_page_shows_them(tmp_path, monkeypatch,
                                                                 encodings_as_they_were):
    """The module and YAML of "Add an encoding", as they stand: the module registers one
    encoding (in this test's registry alone), the YAML holds its config's defaults, a
    config composes from it and is checked by it, and the model it builds trains."""
    steps = section("Add an encoding")
    (module,), (config,) = code_blocks(steps, "python"), code_blocks(steps, "yaml")
    path, yaml_path = named_file(module), named_file(config)
    assert path.startswith("posexp/encodings/") and yaml_path.startswith("configs/encoding/")
    name = Path(path).stem
    before = set(ENCODINGS)
    source = tmp_path / Path(path).name
    source.write_text(module)
    spec = importlib.util.spec_from_file_location(f"doc_example_{name}", source)
    loaded = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, loaded)
    spec.loader.exec_module(loaded)  # the page's module, registering its encoding
    assert set(ENCODINGS) - before == {name}
    entry = ENCODINGS[name]
    written = yaml.safe_load(config)
    defaults = {f.name: f.default for f in dataclasses.fields(entry.config)
                if f.default is not dataclasses.MISSING}
    assert Path(yaml_path).stem == written["name"] == name
    assert written["defaults"] == ["encoding_schema"] and written.get("hparams", {}) == defaults

    configs = tmp_path / "configs"
    (configs / "encoding").mkdir(parents=True)
    (configs / "encoding" / Path(yaml_path).name).write_text(config)
    C.register()
    args = ["--config-dir", str(configs), f"encoding={name}", *TINY]
    with pytest.raises(UsageError, match="no hyperparameter"):  # its config checks hparams
        compose_args([*args, "encoding.hparams.no_such_hparam=1"])
    model = build_model(C.RunSpec.of(compose_args(args)), vocab_size=64)
    assert type(model.encoding) is entry.module
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    logits = model(tokens)
    assert logits.shape == (2, 16, 64) and torch.isfinite(logits).all()
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0
               for p in model.encoding.parameters())  # the encoding takes part


def test_quoted_code_is_the_code():
    """A Python block outside the extension steps quotes the file named just before it."""
    for title in re.findall(r"^## (.+)$", TEXT, re.M):
        text = section(title)
        for match in FENCE.finditer(text):
            if match[2] != "python" or title == "Add an encoding":
                continue
            path = re.findall(r"`([\w/]+\.py)`", text[:match.start()])[-1]
            lines = (ROOT / path).read_text().splitlines()
            quoted = textwrap.dedent(match[3]).splitlines()
            assert any(textwrap.dedent("\n".join(lines[i:i + len(quoted)])).splitlines()
                       == quoted for i in range(len(lines))), f"not in {path}: {quoted[0]}"


def test_the_figure_orders_are_the_registrys():
    """The page lists every registered figure by name and order, in order, and names
    each module that registers one."""
    figures = section("Add a figure")
    listed = re.findall(r"`(\w+)` \((\d+)\)", figures)
    assert [(name, int(order)) for name, order in listed] == [
        (f.name, f.order) for f in FIGURES]
    modules = {f.draw.__module__.rsplit(".", 1)[-1] for f in FIGURES}
    assert all(f"`{m}.py`" in figures for m in modules), modules
