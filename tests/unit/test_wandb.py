"""Weights & Biases as its users expect: its environment variables decide what the config
leaves null, the config wins over them, its files go beside the run or report (or under
WANDB_DIR) and never into the current directory, and posexp says where the run went.
Offline throughout: no network, no key."""
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb")


# One posexp run's W&B sink, in a process of its own: W&B reads its environment once per
# process.  argv: the run directory, then overrides.
SINK = """
import sys
from pathlib import Path
from posexp import config as C
from posexp.sinks import WandbSink
C.register()
cfg = C.resolve(C.compose(["logger=wandb", *sys.argv[2:]]))
sink = WandbSink(cfg, Path(sys.argv[1]), None)
for step in (10, 20):
    sink.log({"step": step, "loss": 5.0 - step / 10})
sink.finish("completed")
"""


def clean_env(tmp_path: Path, **env: str) -> dict:
    """This environment without W&B's variables or key, with ``env`` added."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return {**base, "HOME": str(tmp_path), **env}


def log_a_run(tmp_path: Path, overrides: list[str], **env: str) -> tuple[Path, str]:
    run = tmp_path / "out" / "default" / "rope-L64-s0"
    run.mkdir(parents=True)
    r = subprocess.run([sys.executable, "-c", SINK, str(run), *overrides], cwd=tmp_path,
                       env=clean_env(tmp_path, **env), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "wandb").exists()
    return run, r.stderr


def records(path: Path) -> list:
    """The protobuf records of an offline run's .wandb file: a 7-byte header, then records
    in LevelDB's log format (32 KiB blocks; each chunk has a CRC, a length and a type:
    1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, out, part = 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        part += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(part)
            out.append(record)
            part = b""
    return out


def offline_run(where: Path) -> tuple[Path, object, list[dict]]:
    """The one offline run under where/wandb: its directory, run record and history rows."""
    [run_dir] = (where / "wandb").glob("offline-run-*")
    [file] = run_dir.glob("run-*.wandb")
    found = records(file)
    [run] = [r.run for r in found if r.WhichOneof("record_type") == "run"]
    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in r.history.item}
               for r in found if r.WhichOneof("record_type") == "history"]
    return run_dir, run, history


def test_wandb_variables_decide_what_the_config_leaves_null(tmp_path):
    run, stderr = log_a_run(tmp_path, [], WANDB_MODE="offline", WANDB_PROJECT="from-env",
                            WANDB_ENTITY="lab")
    offline, record, history = offline_run(run)
    assert (record.project, record.entity) == ("from-env", "lab")
    assert record.display_name == "default/rope-L64-s0"
    assert [(h["step"], h["loss"]) for h in history] == [(10, 4.0), (20, 3.0)]
    assert stderr.splitlines() == [f"posexp: W&B run saved offline in {offline}; upload it "
                                   f"with: wandb sync {offline}"]


def test_the_config_wins_over_the_variables(tmp_path):
    run, stderr = log_a_run(tmp_path, ["logger.mode=offline", "logger.project=from-config"],
                            WANDB_MODE="disabled", WANDB_PROJECT="from-env")
    _, record, history = offline_run(run)
    assert record.project == "from-config" and len(history) == 2
    assert "wandb sync" in stderr


def test_wandb_dir_and_disabled(tmp_path):
    run, _ = log_a_run(tmp_path, [], WANDB_MODE="offline", WANDB_DIR=str(tmp_path / "wd"))
    assert not (run / "wandb").exists()
    assert offline_run(tmp_path / "wd")[1].project  # W&B's own default project
    other = tmp_path / "other"
    other.mkdir()
    run, stderr = log_a_run(other, [], WANDB_MODE="disabled")
    assert stderr == "" and not (run / "wandb").exists()
