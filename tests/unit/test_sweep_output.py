"""Jobs of a parallel sweep print whole lines, each named by its run."""
import multiprocessing
import os
import re
import sys

from posexp.sweep.lines import Lines, whole_lines


def test_lines_writes_each_whole_line_once_with_its_prefix(monkeypatch):
    read, write = os.pipe()
    calls = []
    real_write = os.write

    def recording(fd, data):
        calls.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", recording)
    out = Lines(write, "[rope-L16-s0] ")
    out.write("posexp: rope, 0.02M")
    out.write(" parameters\nlength  ppl\n    16  5.")
    assert calls == [b"[rope-L16-s0] posexp: rope, 0.02M parameters\n",
                     b"[rope-L16-s0] length  ppl\n"]
    print("52", file=out)  # print writes the text and the newline separately
    out.write("no newline at the end")
    out.close()
    assert calls[2:] == [b"[rope-L16-s0]     16  5.52\n",
                         b"[rope-L16-s0] no newline at the end\n"]
    assert not out.isatty()  # so tqdm keeps its redrawn bars off
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        assert fh.read() == b"".join(calls)


def chatter(name: str, fd: int) -> None:
    """A job that prints 300 lines in pieces, as print and tqdm do."""
    sys.stdout = Lines(fd, f"[{name}] ")
    for i in range(300):
        sys.stdout.write(f"{name} line {i}: ")
        sys.stdout.write("x" * (i % 50))
        print(" end")
    sys.stdout.close()


def test_two_processes_on_one_pipe_never_mix_lines():
    read, write = os.pipe()
    context = multiprocessing.get_context("fork")
    jobs = [context.Process(target=chatter, args=(name, write)) for name in ("a", "b")]
    for job in jobs:
        job.start()
    os.close(write)
    with os.fdopen(read) as fh:
        text = fh.read()
    for job in jobs:
        job.join()
    lines = text.splitlines()
    assert len(lines) == 600
    assert all(re.fullmatch(r"\[(a|b)\] \1 line (\d+): x* end", line) for line in lines)


def test_whole_lines_puts_the_streams_back(capfd):
    before = sys.stdout, sys.stderr
    with whole_lines("[job] "):
        print("to stdout")
        print("to stderr", file=sys.stderr)
    assert (sys.stdout, sys.stderr) == before
    out, err = capfd.readouterr()
    assert out == "[job] to stdout\n" and err == "[job] to stderr\n"


def test_a_sweep_presets_pinned_budget_names_its_runs_as_the_suites_do():
    """sweep=lr-cpu pins train.tokens at 2M: its runs are named with the budget, as the cpu
    and encodings presets name theirs, so the suites reuse the sweep's runs and never mix a
    2M run with a 4M one in one directory."""
    from posexp.config import register
    from posexp.sweep.plan import plan, run_name_override

    jobs = [["encoding=rope", f"train.lr={lr}", "seed=0", "train.tokens=2000000"]
            for lr in (0.002, 0.004)]
    assert run_name_override(jobs) == [
        "run_name='${encoding.name}-L${train.seq_len}-s${seed},lr=${plain:${train.lr}}'"]
    assert run_name_override(jobs, pinned=["train.tokens", "seed"]) == [
        "run_name='${encoding.name}-L${train.seq_len}-s${seed},lr=${plain:${train.lr}},"
        "tokens=${plain:${train.tokens}}'"]
    register()
    planned, _ = plan(["sweep=lr-cpu", "experiment=cpu-L128", "encoding=rope"],
                      devices=False)
    assert [j.cfg.run_name for j in planned] == [
        f"rope-L128-s0,lr={lr},tokens=2000000" for lr in ("0.002", "0.004", "0.008")]
    assert {tuple(j.cfg.eval.lengths) for j in planned} == {(128,)}  # scored at L only
