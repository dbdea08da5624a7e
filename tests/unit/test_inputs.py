"""Every input answered: one line and an exit code for each bad input, never a traceback; no
code run from a config or a flag; a help that stands alone.

Most cases run in this process through ``cli.main`` -- the same function the ``posexp``
script calls, so the exit code and stderr are what a user sees -- with Hydra's entry point
replaced by a guard: every case here must end before anything would run.  A few things only a
real process shows (the script's help, a refused code path leaving no trace on disk) run as
subprocesses.
"""
from __future__ import annotations

import json
import math
import typing

import pytest

from posexp import config as C
from posexp.cli.errors import fail
from posexp.config import bounds
from posexp.errors import UsageError
from posexp.runs import Run
from tests.bad_inputs import BAD
from tests.conftest import compose_args, plan_sweep, read_json


def test_the_bad_inputs_are_distinct():
    keys = [tuple(args) for args, _, _ in BAD]
    assert len(keys) == len(set(keys))


# --- the malformed overrides: every key x every kind of bad value, through the check -------
def leaf_keys() -> list[str]:
    """Every key of posexp's schema, dotted; and the config groups."""
    out = []
    for key in C.schema_keys():
        if key in C.GROUPS:
            out.append(key)
            out += [f"{key}.{sub}" for sub in C.schema_keys(key)]
        else:
            out.append(key)
    return out


MALFORMED = ["", "abc", "-1", "nan", "100000000000000000000000000000", "${nope}"]


def test_malformed_overrides_end_in_a_usage_error_never_another_exception():
    """Every key with one kind of {empty, string, negative, nan, huge, interpolation} --
    each kind given to a sixth of the keys, in rotation, so that every kind meets keys of
    every section with six keys or more (all 6 x every key took two minutes, two kinds a
    key 50 s) -- through compose and check alone: each either composes into a config that
    passes the check or is refused with a one-line UsageError, no other exception, which
    the CLI would show as a crash."""
    C.register()
    keys = leaf_keys()
    assert len(keys) > 60
    refused = 0
    for i, key in enumerate(keys):
        override = f"{key}={MALFORMED[i % 6]}"
        try:
            compose_args([override])
        except UsageError as e:
            refused += 1
            assert "\n" not in str(e).strip() and str(e), override
        except Exception as e:  # pragma: no cover - the failure this test exists for
            pytest.fail(f"{override}: {type(e).__name__}: {e}")
    assert refused > len(keys) / 2  # most of them are bad


def test_malformed_eval_overrides_of_a_saved_run(inputs):
    """The same values through posexp eval's path (a saved run's config + overrides)."""
    saved = Run(inputs / "runs/e/good").config()
    for key in [f"eval.{k}" for k in C.schema_keys("eval")] + ["device", "attention"]:
        for value in MALFORMED:
            try:
                cfg = C.apply_overrides(saved, [f"{key}={value}"],
                                          allowed=("eval.", "device", "attention"))
                C.check_device_name(cfg.device)
                C.check_eval(cfg)
                C.check_attention(cfg)
            except UsageError as e:
                assert "\n" not in str(e).strip()
            except Exception as e:  # pragma: no cover
                pytest.fail(f"{key}={value}: {type(e).__name__}: {e}")


# --- what keeps working -------------------------------------------------------------------
def test_launchers_and_config_dirs_that_run_no_code_keep_working(inputs):
    for launcher in ("basic", "joblib", "submitit_local"):
        jobs, _ = plan_sweep(["encoding=rope,alibi", f"hydra/launcher={launcher}", "--cfg", "job"])
        assert [j.cfg.encoding.name for j in jobs] == ["rope", "alibi"]
        assert launcher.split("_")[0] in jobs[0].hydra.launcher._target_.lower()
    cfg = compose_args(["--config-dir", str(inputs / "cd_primary"), "--config-name", "mine"])
    assert cfg.seed == 7
    cfg = compose_args(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                       "+hydra.job.env_set.OMP_NUM_THREADS=1"])
    assert cfg.encoding.name == "rope"


def test_devices_are_checked_against_what_exists():
    C.register()
    for device in ("auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps"):
        assert compose_args([f"device={device}"]).device == device  # the schema takes them
    C.check_device("cuda:1", cuda_count=2, mps=False)
    C.check_device("mps", cuda_count=0, mps=True)
    with pytest.raises(UsageError, match=r"device=cuda:1 but torch sees 1 CUDA GPU \(cuda:0\)"):
        C.check_device("cuda:1", cuda_count=1, mps=False)
    with pytest.raises(UsageError, match="sees 3 CUDA GPUs \\(cuda:0, cuda:1, cuda:2\\)"):
        C.check_device("cuda:3", cuda_count=3, mps=False)
    with pytest.raises(UsageError, match="device=cuda but torch sees no CUDA GPU"):
        C.check_device("cuda", cuda_count=0, mps=False)
    with pytest.raises(UsageError, match="device=mps but torch has no MPS device"):
        C.check_device("mps", cuda_count=4, mps=False)


# --- unit pieces ----------------------------------------------------------------------------
def test_unknown_keys_name_the_closest_one():
    assert C.unknown_key("train.seqlen") == "train has no key 'seqlen'; did you mean 'seq_len'?"
    assert C.unknown_key("eval.lengths.0") is None and C.unknown_key("logger.tags.1") is None
    assert C.unknown_key("data.vocab") == "data has no key 'vocab'; did you mean 'vocab_size'?"


def test_resume_keeps_the_records_it_can_read(inputs, tmp_path):
    """A metrics.jsonl with a bare number, invalid UTF-8 and a cut line still resumes: the
    unreadable lines are dropped, the others up to the checkpoint's step kept."""
    run = Run(tmp_path / "run")
    run.path.mkdir()
    (run.path / "run.json").write_text('{"status": "interrupted"}')
    (run.path / "metrics.jsonl").write_bytes(
        b'{"step": 8, "loss": 5.0}\n5\n\xff\xfe{"step": 9}\n[1, 2]\n{"step": 16, "loss": 4.0}\n'
        b'{"step": 24, "loss": 3.0}\n{"step": 2')
    cfg = Run(inputs / "runs/e/good").config()
    run.resume(16, cfg)
    lines = (run.path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [8, 16]
    assert read_json(run.path / "run.json")["status"] == "running"


def test_fail_prints_one_line_for_any_error(capsys, monkeypatch):
    monkeypatch.delenv("POSEXP_DEBUG", raising=False)
    for error, code in [(UsageError("a\nb"), 2), (OSError(28, "No space left on device", "f"), 1),
                        (KeyboardInterrupt(), 130), (RuntimeError("x\ny"), 1),
                        (MemoryError(), 1)]:
        with pytest.raises(SystemExit) as done:
            fail(error)
        assert done.value.code == code
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    from posexp.run.training import Interrupted

    with pytest.raises(SystemExit) as done:
        fail(Interrupted(2, 300))
    assert done.value.code == 130
    assert capsys.readouterr().err.startswith("posexp: stopped by SIGINT at step 300; ")
    monkeypatch.setenv("POSEXP_DEBUG", "1")
    try:
        raise UsageError("shown with its traceback")
    except UsageError as e:
        with pytest.raises(SystemExit):
            fail(e)
    assert "Traceback" in capsys.readouterr().err


def test_schema_types_cover_every_check():
    """Every numeric key is bounded by config.check (the malformed sweep's 'huge' value)."""
    C.register()
    for key in leaf_keys():
        node, _, leaf = key.rpartition(".")
        if leaf in C.GROUPS:
            continue
        kind = C.schema_keys(node)[leaf]
        if kind in (int, float, int | None, float | None):
            huge = "1e300" if float in typing.get_args(kind) or kind is float else str(2**70)
            with pytest.raises(UsageError):
                compose_args([f"{key}={huge}"])
    assert math.isfinite(bounds.MAX_PARAMS)
