"""Reports, the claim suite's verdicts and the sweep summary, on synthetic run directories.

Each run directory is written as posexp writes one (config.yaml of a composed config,
run.json, eval.json) with chosen perplexities, so every number a test checks is known.
Only two tests go through the real CLI.
"""
from posexp import config as C
from tests.unit.test_report import (  # noqa: F401
    NO,
    SMALL,
    VERSIONS,
    config_text,
    curve,
    make_run,
    point,
    write_run,
)

C.register()


# --- through the CLI ---------------------------------------------------------------------
def test_cli_report_of_a_directory_without_runs(posexp, tmp_path):
    (tmp_path / "empty").mkdir()
    r = posexp("report", "empty")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == ["posexp: error: no posexp runs under empty"]
    assert list((tmp_path / "empty").iterdir()) == []


def test_cli_report_names_a_damaged_run_and_reports_the_rest(posexp, tmp_path):
    make_run(tmp_path / "res", "good", ppl={16: 4.0, 32: 5.0, 64: 6.0})
    bad = make_run(tmp_path / "res", "bad")
    (bad / "run.json").write_text('{"status": "completed", "encoding": "rope"}')
    r = posexp("report", "res")
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        "posexp: warning: not included: res/bad/run.json is damaged: no 'seq_len'"]
    assert "1 completed runs, 1 not included" in r.stdout
    report = tmp_path / "res" / "report"
    assert (report / "extrapolation_nonoverlapping.png").stat().st_size > 10_000
    md = (report / "summary.md").read_text()
    assert "| rope | 16 | 1 | **4.000** | 5.000 | 6.000 |" in md
    assert "| rope | 16 | 1 | **1.000** | 1.250 | 1.500 |" in md
    assert "| res/bad | damaged | res/bad/run.json is damaged: no 'seq_len' |" in md


def test_cli_report_in_paper_style_of_chosen_and_renamed_series(posexp, tmp_path):
    for enc in ("rope", "alibi", "nope"):
        make_run(tmp_path / "res", enc, encoding=enc, ppl={16: 4.0, 32: 5.0, 64: 6.0})
    r = posexp("report", "res", "--style", "paper", "--width", "one", "--exclude",
                    "nope*", "--label", "rope L=16=RoPE")
    assert r.returncode == 0, r.stderr
    report = tmp_path / "res" / "report"
    assert {f.name for f in report.glob("extrapolation_nonoverlapping.*")} == {
        f"extrapolation_nonoverlapping.{ext}" for ext in ("pdf", "svg", "png", "caption.txt")}
    caption = (report / "extrapolation_nonoverlapping.caption.txt").read_text().splitlines()
    assert caption[-1] == ("Made by: posexp report res --style paper --width one --exclude "
                           "'nope*' --label 'rope L=16=RoPE'")
    md = (report / "summary.md").read_text()
    assert "| rope | 16 | 1 | **4.000** |" in md and "| nope |" not in md


def test_cli_report_refuses_a_bad_style_or_selection_in_one_line(posexp, tmp_path):
    make_run(tmp_path / "res", "rope", ppl={16: 4.0, 32: 5.0})
    for args, message in (
            (("--label", "rope"), "--label 'rope': write --label OLD=NEW"),
            (("--label", "alibi L=16=ALiBi"), "--label 'alibi L=16=ALiBi': no series is "
                                              "labelled what comes before any of its '='"),
            (("--include", "alibi*"), "--include 'alibi*' matches no series; the report's "
                                      "labels: rope L=16"),
            (("--style", "print"), "--style 'print': choose one of screen, paper"),
            (("--width", "one"), "--width sizes a paper's figures: use it with --style paper")):
        r = posexp("report", "res", *args)
        assert r.returncode == 2, (args, r.stderr)
        [line] = r.stderr.splitlines()
        assert line.startswith(f"posexp: error: {message}"), args
        assert not (tmp_path / "res" / "report").exists()
