import copy
import io
import json
import os
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from posexp import cli
from posexp import config as C
from posexp.cli.args import parse_args
from tests import forkserver

REPO = Path(__file__).resolve().parents[1]

# A model and budget small enough that a run through the real CLI takes a few seconds.
TINY = [
    "model.d_model=32", "model.n_layer=1", "model.n_head=2",
    "train.seq_len=16", "train.tokens=8192", "train.batch_tokens=128", "train.log_every=8",
    "train.val_every_tokens=4096", "train.val_tokens=256",
    "eval.tokens=512", "eval.lengths=[16,32,64]", "device=cpu",
]

# One OpenMP thread for torch in the test processes and every posexp they start: two
# workers on two cores, each training with two threads, leave threads waiting at every op
# for a core (a tiny run trained 20-100x slower so, measured); numbers stay comparable
# because every run of the suite trains with the same count.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def compose_args(args: list[str], command: str = "train"):
    """The checked config ``posexp COMMAND ARGS`` composes (overrides and --config-dir,
    --config-name), in this process: Hydra's compose API, as lightning-hydra-template's
    tests use it."""
    a = parse_args(list(args), command)
    return C.compose(a.overrides, a.config_dir, a.config_name, command)


def plan_sweep(args: list[str]):
    """The jobs ``posexp sweep ARGS`` would run, composed and checked (posexp.sweep.plan)."""
    from posexp.sweep.plan import plan

    a = parse_args(list(args), "sweep")
    return plan(a.overrides, a.config_dir, a.config_name, devices="--cfg" not in a.flags)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The whole suite (no paths given: the README's command, CI) runs on two pytest-xdist
    workers, one file to a worker so that a file's shared runs are trained once: its time is
    mostly process starts, imports and Hydra, on one core each.  Paths, -n N, -n0 or
    -p no:xdist decide otherwise."""
    if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and config.option.numprocesses is None
            and config.args_source == pytest.Config.ArgsSource.TESTPATHS):
        config.option.numprocesses = 2
        config.option.dist = "loadfile"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def posexp_process(cache_dir, tmp_path):
    """``python -m posexp ARGS`` as a process of its own (forked warm where a fresh one
    would import alike: tests/forkserver.py), from tmp_path, with a shared token cache."""

    def run(*args: str, cwd: Path | None = None, env: dict | None = None):
        full_env = {**os.environ, "POSEXP_CACHE": str(cache_dir), **(env or {})}
        full_env.pop("POSEXP_DEBUG", None)
        return forkserver.run(list(args), cwd=cwd or tmp_path, env=full_env, timeout=600)

    return run


def in_process(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """``posexp ARGS`` through ``cli.main`` -- what the posexp script calls -- in this
    process: its exit code, stdout and stderr as a subprocess would give them, without a
    process start and torch's import.  What the command leaves behind in the process is put
    back afterwards, as the end of a process would: the working directory, the environment
    (Hydra's job sets hydra.job.env_set in it), the registries an encoding or task of the
    user's own adds itself to, and the user's modules it imported (another test's module of
    the same name is not this one)."""
    out, err = io.StringIO(), io.StringIO()
    registries = [(r, copy.copy(r)) for r in registries_of_posexp()]
    modules = set(sys.modules)
    try:
        with pytest.MonkeyPatch.context() as mp, redirect_stdout(out), redirect_stderr(err):
            mp.chdir(cwd)
            mp.delenv("POSEXP_DEBUG", raising=False)
            for key, value in env.items():
                mp.setenv(key, value)
            try:
                cli.main(list(args))
            except SystemExit as e:
                code = e.code
    finally:
        for registry, before in registries:
            registry.clear()
            registry.update(before) if isinstance(registry, dict) else registry.extend(before)
        for name in set(sys.modules) - modules:
            if users_module(sys.modules[name]):
                del sys.modules[name]
    return subprocess.CompletedProcess(["posexp", *args], code, out.getvalue(), err.getvalue())


def registries_of_posexp() -> list:
    """The registries an extension adds itself to (docs/architecture.md)."""
    from posexp.claims.registry import CLAIM_SETS
    from posexp.data.kinds import KINDS
    from posexp.data.tasks.registry import TASKS
    from posexp.encodings.registry import ENCODINGS
    from posexp.report.base import FIGURES

    return [ENCODINGS, TASKS, CLAIM_SETS, FIGURES, KINDS]


def users_module(module: object) -> bool:
    """A module imported from outside the interpreter's packages and posexp's own: a user's
    (a test's) own."""
    file = getattr(module, "__file__", None)
    if not file:
        return False
    path = Path(file).resolve()
    return not any(path.is_relative_to(root) for root in (
        Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), REPO / "posexp"))


@pytest.fixture
def posexp(cache_dir, tmp_path):
    """``posexp ARGS`` from tmp_path with a shared token cache, through cli.main in this
    process (``in_process``): for every test of what a command does.  A test of the process
    boundary itself -- signals, kills, locks between processes, the script, a launcher's
    processes, W&B's service, environment variables read at import -- takes
    ``posexp_process``."""

    def run(*args: str, cwd: Path | None = None, env: dict | None = None):
        return in_process(list(args), cwd or tmp_path, {"POSEXP_CACHE": str(cache_dir),
                                                        **(env or {})})

    return run


@pytest.fixture(scope="session")
def trained(cache_dir, tmp_path_factory):
    """``trained(encoding)``: the result and directory of ``posexp train encoding=ENCODING
    *TINY results_dir=out``, run through cli.main once per session.  Tests that change a
    run take a copy (``copy_run``)."""
    runs: dict[str, tuple[subprocess.CompletedProcess, Path]] = {}
    root = tmp_path_factory.mktemp("trained")

    def get(encoding: str) -> tuple[subprocess.CompletedProcess, Path]:
        if encoding not in runs:
            r = in_process(["train", f"encoding={encoding}", *TINY, "results_dir=out"], root,
                           {"POSEXP_CACHE": str(cache_dir)})
            runs[encoding] = r, root / "out" / "default" / f"{encoding}-L16-s0"
        return runs[encoding]

    return get


def copy_run(run: Path, results_dir: Path) -> Path:
    """A copy of a run at results_dir/<experiment>/<run_name>, its files' times kept."""
    dest = results_dir / run.parent.name / run.name
    shutil.copytree(run, dest)
    return dest


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def assert_usage_error(r, message: str) -> None:
    """Exit 2, one line on stderr that starts with posexp's prefix and holds ``message``."""
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posexp: error: "), r.stderr
    assert message in lines[0]
    assert "Traceback" not in r.stderr


def build_model(cfg, vocab_size: int):
    """The model posexp builds for a composed config (posexp.run.setup.build_model)."""
    from posexp.run.setup import build_model as build

    return build(C.RunSpec.of(cfg), vocab_size)


def score_curve(model, val, lengths, mode, stride, n_tokens, batch_tokens=32_768,
                per_position_buckets=4, device=None, token_bytes=None, progress=None,
                rope_scaling=None, documents=(0,), spans=None):
    """evaluate.extrapolation_curve with its scoring settings spelled out one by one, on
    ``spans`` or else the spans of ``n_tokens`` targets over a validation split ``val``
    whose documents start at ``documents`` (one document: the last ``n_tokens`` targets)."""
    import numpy as np
    import torch

    from posexp.evaluate.windows import Scoring, extrapolation_curve, scored_spans

    if spans is None:
        spans = scored_spans(len(val), np.asarray(documents, dtype=np.int64), n_tokens)
    return extrapolation_curve(model, val, lengths,
                               Scoring(mode, stride, n_tokens, batch_tokens,
                                       per_position_buckets),
                               spans, device or torch.device("cpu"), token_bytes, progress,
                               rope_scaling)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, cache_dir) -> Path:
    """The files the bad inputs of tests/bad_inputs.py point at, written once per module."""
    from tests.bad_inputs import make_inputs

    d = tmp_path_factory.mktemp("inputs")
    old = os.environ.get("POSEXP_CACHE")
    os.environ["POSEXP_CACHE"] = str(cache_dir)
    try:
        make_inputs(d)
    finally:
        if old is None:
            os.environ.pop("POSEXP_CACHE")
        else:
            os.environ["POSEXP_CACHE"] = old
    return d


@pytest.fixture
def listed_runs(tmp_path):
    """Six runs of one experiment, one of each status ls tells apart (runs_on_disk.six_runs)."""
    from tests.runs_on_disk import six_runs

    return six_runs(tmp_path)
