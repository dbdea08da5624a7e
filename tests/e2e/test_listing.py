"""posexp ls and posexp compare on run directories whose every number is known."""
import contextlib
import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading

from posexp import stats
from posexp.listing import number
from tests import forkserver
from tests.conftest import TINY, assert_usage_error, read_json
from tests.runs_on_disk import curve_point, losses, write_run
from tests.unit.test_listing import ANSI

SIZE = "d32\u00d71L"  # d_model x n_layer of TINY


def interval(p: dict) -> str:
    return f"{number(p['ppl'])} [{number(p['ppl_low'])}, {number(p['ppl_high'])}]"


def test_ls_lists_every_run_on_one_aligned_line(posexp, tmp_path, listed_runs):
    root, curve = listed_runs
    r = posexp("ls", str(root))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert not ANSI.search(r.stdout)  # plain in a pipe
    assert lines[0].split() == ["RUN", "ENCODING", "L", "SEED", "MODEL", "STATUS", "PPL@L",
                                "LONGEST", "PPL@LONGEST"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == ["exp/alibi-L16-s0", "exp/learned-L16-s0", "exp/nope-L16-s0",
                          "exp/rope-L16-s0", "exp/rope-L16-s1", "exp/sinusoidal-L16-s0"]
    # the columns line up: every status starts where the header's STATUS does
    column = lines[0].index("STATUS")
    assert {line[column:].split()[0] for line in lines[1:]} == {
        "completed", "running", "failed", "diverged", "damaged"}
    alibi = rows["exp/alibi-L16-s0"].split(None, 6)
    assert alibi[:6] == ["exp/alibi-L16-s0", "alibi", "16", "0", SIZE, "completed"]
    assert alibi[6].split("  ")[0] == interval(curve[0])
    assert rows["exp/alibi-L16-s0"].rstrip().endswith(f"64  {interval(curve[2])}")
    assert rows["exp/learned-L16-s0"].rstrip().endswith(f"{interval(curve[0])}       64  n/a")
    assert rows["exp/rope-L16-s1"].split()[1:] == ["rope", "16", "1", SIZE, "running"]
    # the reason in place of the perplexities, cut short; a damaged run names its file,
    # relative to the run
    ppl = lines[0].index("PPL@L")
    failed = rows["exp/nope-L16-s0"]
    assert failed[ppl:].startswith("RuntimeError: CUDA out of memory. Tried to allocate")
    assert failed.endswith("…") and len(failed) - ppl == 70
    assert "training diverged: loss became nan at step 5" in rows["exp/rope-L16-s0"]
    damaged = rows["exp/sinusoidal-L16-s0"]
    assert damaged.split()[1:6] == ["-", "-", "-", "-", "damaged"]
    assert "eval.json is unreadable" in damaged and str(root) not in damaged


def test_ls_without_runs_is_one_line_and_exit_2(posexp, tmp_path):
    (tmp_path / "empty").mkdir()
    assert_usage_error(posexp("ls", "empty"), "no posexp runs under empty")
    assert_usage_error(posexp("ls", "missing"), "missing does not exist")
    (tmp_path / "file").write_text("x")
    assert_usage_error(posexp("ls", "file"), "file is not a directory")
    assert_usage_error(posexp("ls"), "results does not exist")  # the default DIR


def test_compare_paired_ratios_and_the_keys_that_differ(posexp, tmp_path):
    a_curve = [curve_point("nonoverlapping", L, losses(1.5, seed=L)) for L in (16, 32, 64)]
    b_curve = [curve_point("nonoverlapping", L, losses(1.6 + L / 200, seed=L))
               for L in (16, 32, 64, 128)]
    b_curve.append(curve_point("sliding", 64, losses(1.55, seed=7), stride=32))
    # A scored also other tokens: left out, not mixed into the rows
    elsewhere = curve_point("nonoverlapping", 16, losses(3.0, n=256), first=5000)
    a = write_run(tmp_path / "out/x/alibi-L16-s0", ["encoding=alibi"], [*a_curve, elsewhere])
    b = write_run(tmp_path / "out/y/rope-L16-s0", ["encoding=rope", "train.lr=0.001",
                                                   "eval.batch_tokens=4096"], b_curve)
    r = posexp("compare", str(a), str(b))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.splitlines()[0].split() == ["A", str(a), "alibi", "L=16", "seed", "0", SIZE]
    ident, other = out.index("identity keys that differ:"), out.index("other keys that differ:")
    assert ident < other < out.index("nonoverlapping: 512 validation tokens in spans")
    assert re.search(r"encoding\.name\s+alibi\s+rope\n", out[ident:other])
    assert re.search(r"train\.lr\s+0\.002\s+0\.001\n", out[ident:other])
    assert re.search(r"eval\.batch_tokens\s+32768\s+4096\n", out[other:])
    assert "experiment" not in out and "run_name" not in out  # where a run is, not what
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")
            and line.split()[0][0].isdigit()}
    for pa, pb in zip(a_curve, b_curve[:3], strict=True):
        row = rows[str(pa["length"])]
        assert interval(pa) in row and interval(pb) in row
        assert stats.ratio_interval(pb, pa).text(3) in row  # paired over the same blocks
    assert "<- A and B trained at 16" in rows["16"]
    assert rows["128"].split()[1:3] == ["-", f"{b_curve[3]['ppl']:.2f}"]
    assert rows["64/32"].split()[1] == "-"  # B's sliding point alone
    assert "  not shown: A's points on the 256 validation targets 5,001-5,256 (one stretch)\n" \
        in out


def test_compare_says_when_points_are_not_comparable(posexp, tmp_path):
    curve = [curve_point("nonoverlapping", 16, losses(1.5))]
    a = write_run(tmp_path / "a/e/r", ["encoding=alibi"], curve)
    other_tokens = [curve_point("nonoverlapping", 16, losses(1.5, n=256), first=1256)]
    b = write_run(tmp_path / "b/e/r", ["encoding=alibi", "eval.tokens=256"], other_tokens)
    r = posexp("compare", str(a), str(b))
    assert r.returncode == 0, r.stderr
    assert "A and B scored different validation tokens" in r.stdout
    row = next(line for line in r.stdout.splitlines() if line.strip().startswith("16 "))
    assert row.rstrip().endswith("different tokens: not comparable  <- A and B trained at 16")
    c = write_run(tmp_path / "c/e/r", ["encoding=alibi"], curve, corpus="9" * 64)
    r = posexp("compare", str(a), str(c))
    assert r.returncode == 0, r.stderr
    assert "different corpora: A stdlib (7f3e3fa2ed09), B stdlib (999999999999); their " \
           "perplexities are not comparable" in r.stdout
    assert "different corpora  <-" in r.stdout and "[95%]" in r.stdout


def test_compare_refuses_what_it_cannot_compare(posexp, tmp_path, listed_runs):
    root, _ = listed_runs
    done = root / "exp/alibi-L16-s0"
    assert_usage_error(posexp("compare", str(done), str(root / "exp/rope-L16-s1")),
                       "rope-L16-s1 is running; posexp compare needs two completed runs")
    assert_usage_error(posexp("compare", str(done), str(root / "exp/sinusoidal-L16-s0")),
                       "sinusoidal-L16-s0 is damaged: eval.json is unreadable")
    assert_usage_error(posexp("compare", str(done), str(root)), "is not a posexp run")
    assert_usage_error(posexp("compare", str(done), "nowhere"), "nowhere is not a directory")
    assert_usage_error(posexp("compare", str(done)), "Missing argument 'RUN_B'")


def on_a_terminal(args: list[str], cwd, env: dict) -> str:
    """What `python -m posexp ARGS` writes to stderr when stderr is a terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    chunks: list[bytes] = []

    def drain() -> None:
        with contextlib.suppress(OSError):  # EIO once the child has closed the terminal
            while chunk := os.read(master, 4096):
                chunks.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    r = forkserver.run(list(args), cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                       stderr=slave, timeout=600)
    os.close(slave)
    reader.join()
    os.close(master)
    assert r.returncode == 0
    return b"".join(chunks).decode(errors="replace")


def test_ls_compare_and_eval_on_real_runs(posexp, tmp_path, cache_dir):
    posexp = posexp  # a terminal below is a process of its own
    for encoding in ("alibi", "rope"):
        r = posexp("train", f"encoding={encoding}", *TINY, "results_dir=out")
        assert r.returncode == 0, r.stderr
    a, b = (tmp_path / "out/default" / f"{e}-L16-s0" for e in ("alibi", "rope"))
    curves = [read_json(run / "eval.json")["curve"] for run in (a, b)]
    r = posexp("ls", "out")
    assert r.returncode == 0, r.stderr
    line = r.stdout.splitlines()[1]
    assert line.split()[:6] == ["default/alibi-L16-s0", "alibi", "16", "0", SIZE, "completed"]
    assert line.endswith(f"{interval(curves[0][0])}       64  {interval(curves[0][2])}")

    r = posexp("compare", "out/default/alibi-L16-s0", "out/default/rope-L16-s0")
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("      32  "))
    assert row.split("  ")[-1] == stats.ratio_interval(curves[1][1], curves[0][1]).text(3)

    # eval: a header first; a progress bar on a terminal only
    args = ["eval", "out/default/alibi-L16-s0", "eval.lengths=[16,32]"]
    header = ("posexp eval: out/default/alibi-L16-s0: nonoverlapping at 16, 32 on "
              "512 validation tokens spread over the split (cpu)")
    r = posexp(*args)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [header]
    shown = on_a_terminal(args, tmp_path, {**os.environ, "POSEXP_CACHE": str(cache_dir)})
    assert shown.startswith(header)
    # over the windows of every length (at least one per span at each), then gone
    total = int(re.search(r"\rscoring nonoverlapping: +0%.* 0/(\d+) ", shown).group(1))
    assert total >= 2 * 38
    assert shown.endswith("\r" + " " * 99 + "\r")
