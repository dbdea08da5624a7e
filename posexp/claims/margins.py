"""A suite's margins: its claims' kinds, margins and the lengths they read, in a file of their
own (configs/reproduce/margins/<name>.yaml), committed before the suite's sweep trains.

A margin chosen after the curves are seen can be chosen to make a claim hold; a reviewer
believes one only when it was fixed first.  So the margins are not a part of the preset that
changes with its runs and rates: the preset names its margins file (``margins: NAME``), and
the verdicts record the file's hash, the commit that first fixed it and every later commit that
changed it -- beside the time the suite's first run started.  A margins file edited after
that reads so in every verdicts.md, and a file that is not committed reads "not fixed in any
commit".  Git is asked, not trusted blindly: outside a git checkout (an installed wheel) the
history is "not known", never guessed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from posexp.config import CONFIG_DIR
from posexp.errors import UsageError, flat

MARGINS_DIR = Path(CONFIG_DIR) / "reproduce" / "margins"


def margins_path(preset_file: Path, name: str) -> Path:
    """The margins file a preset names: a name in configs/reproduce/margins/, or a YAML path
    relative to the preset's own directory."""
    if name.endswith((".yaml", ".yml")):
        path = Path(name)
        return path if path.is_absolute() else preset_file.parent / path
    if "/" in name or "\\" in name or name.startswith("."):
        raise UsageError(f"preset {preset_file}: margins must be a name in {MARGINS_DIR} or "
                         f"a .yaml file, got {name!r}")
    return MARGINS_DIR / f"{name}.yaml"


def load_margins(preset_file: Path, name: str) -> dict:
    """The thresholds mapping a margins file holds (checked by the preset's loader)."""
    path = margins_path(preset_file, name)
    if not path.is_file():
        found = sorted(p.stem for p in MARGINS_DIR.glob("*.yaml"))
        raise UsageError(f"preset {preset_file}: its margins file {path} does not exist; "
                         f"shipped: {', '.join(found)}")
    try:
        tree = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UsageError(f"margins file {path}: cannot read it ({flat(str(e))})") from None
    if not isinstance(tree, dict):
        raise UsageError(f"margins file {path}: the file must be a mapping of thresholds")
    return tree


@dataclass(frozen=True)
class History:
    """What git says of one file: the commits that touched it, oldest first, as (hash, time),
    and whether the working tree differs from the last; ``known`` false outside git."""

    known: bool
    commits: tuple[tuple[str, dt.datetime], ...] = ()
    dirty: bool = False


def history(path: Path) -> History:
    """The file's commits (following renames) and whether it has uncommitted changes."""
    where = path.resolve().parent
    try:
        _git(where, "rev-parse", "--is-inside-work-tree")
        status = _git(where, "status", "--porcelain", "--", path.name)
        log = _git(where, "log", "--follow", "--format=%H %cI", "--", path.name, check=False)
    except (OSError, subprocess.SubprocessError):
        return History(False)
    commits = tuple((h, dt.datetime.fromisoformat(t)) for h, t in
                    (line.split(" ", 1) for line in reversed(log.splitlines()) if line))
    return History(True, commits, bool(status.strip()) or not commits)


def _git(where: Path, *args: str, check: bool = True) -> str:
    """git's output; ``check`` false where a repository with no commit yet fails (git log)."""
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                          timeout=30, check=check)
    return done.stdout


def margins_record(path: Path) -> dict:
    """What verdicts.json records of the margins file: its path as given, hash and history."""
    made = history(path)
    return {"file": _shown(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "history_known": made.known, "uncommitted": made.dirty,
            "commits": [{"commit": h, "time": t.isoformat()} for h, t in made.commits]}


def _shown(path: Path) -> str:
    """The path under configs/ for a shipped file (the same on every machine), else as is."""
    try:
        return f"configs/{path.resolve().relative_to(Path(CONFIG_DIR).resolve())}"
    except ValueError:
        return str(path)


def margins_text(record: dict, first_start: str | None,
                 reused: tuple[list[str], str] | None = None) -> str:
    """One paragraph for verdicts.md: where the margins are, when git says they were fixed
    and changed, against when the suite's first run started (``first_start``, ISO time);
    ``reused``: the encodings whose runs another suite trained and the first of their starts,
    said beside (their curves could be seen when the margins were fixed)."""
    head = f"Margins: {record['file']} (sha256 {record['sha256'][:16]})"
    if not record["history_known"]:
        return f"{head}; its history is not known (not in a git checkout)."
    commits = record["commits"]
    if not commits:
        return f"{head}; **not fixed in any commit**: these margins are not pre-registered."
    first, later = commits[0], commits[1:]
    text = f"{head}; fixed in commit {first['commit'][:10]} ({first['time'][:10]})"
    if first_start is not None:
        before = dt.datetime.fromisoformat(first["time"]) <= dt.datetime.fromisoformat(
            first_start)
        text += (", before the suite's first run started" if before else
                 ", **after the suite's first run started**") + f" ({first_start[:10]})"
        late = [c for c in later if dt.datetime.fromisoformat(c["time"])
                > dt.datetime.fromisoformat(first_start)]
        if late:
            text += ("; **changed after the first run started** in "
                     + ", ".join(c["commit"][:10] for c in late))
    if record["uncommitted"]:
        text += "; **the file has uncommitted changes**"
    if reused is not None:
        text += (f"; the runs of {', '.join(reused[0])} are another suite's, reused (from "
                 f"{reused[1][:10]}): their curves could be seen before the margins were fixed")
    return text + "."
