"""scripts/bench.py --quick: the structure of what it writes (never its speed)."""
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"
TRAIN = BENCH.with_name("bench_train.py")
RECORDS = BENCH.with_name("records.sh")


def test_quick_benchmark_writes_json_and_markdown(tmp_path):
    r = subprocess.run([sys.executable, str(BENCH), "--quick", "--xtransformers",
                        "--encodings", "nope,learned,rope,alibi,t5,fire",
                        "--bias-kernels", "sdpa,auto,flash", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    [json_file] = tmp_path.glob("bench-cpu-quick-*.json")
    result = json.loads(json_file.read_text())
    assert result["setup"]["device"] == "cpu" and result["setup"]["peak_tflops"] > 0
    assert result["setup"]["x_transformers"] == "2.31.10" and result["setup"]["complete"]
    rows = [(row["model"], row["encoding"], row["attention"]) for row in result["rows"]]
    assert rows == [
        ("posexp", "nope", "sdpa"), ("x-transformers", "nope", "attn_flash"),
        ("posexp", "learned", "sdpa"), ("x-transformers", "learned", "attn_flash"),
        ("posexp", "rope", "sdpa"), ("x-transformers", "rope", "attn_flash"),
        # auto is sdpa on the CPU; flash (ALiBi's alone) needs CUDA: no row for it here
        ("posexp", "alibi", "sdpa"), ("posexp", "alibi", "sdpa"),
        ("x-transformers", "alibi", "attn_flash"),
        ("posexp", "t5", "sdpa"), ("posexp", "t5", "sdpa"),
        ("posexp", "fire", "sdpa"), ("posexp", "fire", "sdpa")]
    for row in result["rows"]:
        t = row["train"]["eager"]
        assert t["tok_per_s"] > 0 and 0 < t["mfu"] < 1.5 and t["peak_gib"] > 0
        assert [e["length"] for e in row["eval"]] == [256, 1024]
        learned = row["encoding"] == "learned"
        assert [e["applicable"] for e in row["eval"]] == [not learned, not learned]
        if row["model"] == "posexp":
            assert row["curve"]["lengths"] == [64, 161, 406, 1024]
            assert row["curve"]["applicable"] == (1 if learned else 4)
    assert {(a["encoding"], a["kernel"]) for a in result["kernel_agreement"]} == {
        ("alibi", "sdpa"), ("alibi", "flex"), ("t5", "sdpa"), ("t5", "flex"), ("fire", "sdpa")}
    assert all(a["max_abs_diff"] < 1e-4 for a in result["kernel_agreement"])
    md = json_file.with_suffix(".md").read_text()
    assert md.count("| eager |") == 13 and "measured matmul peak" in md


def test_end_to_end_bench_trains_two_processes_and_sets_them_beside_the_bench(tmp_path):
    """scripts/bench_train.py --quick: posexp train twice (seeds 0, 1) for each encoding,
    its run.json's speed beside the bench's step rate of the same encoding."""
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"rows": [
        {"model": "x-transformers", "encoding": "rope", "train": {"eager": {"tok_per_s": 9}}},
        {"model": "posexp", "encoding": "rope",
         "train": {"eager": {"tok_per_s": 10.0}, "compiled": {"tok_per_s": 20000.0}}},
        {"model": "posexp", "encoding": "rope", "train": {"eager": {"tok_per_s": 1.0}}}]}))
    r = subprocess.run([sys.executable, str(TRAIN), "--quick", "--encodings", "rope",
                        "--bench", str(bench), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    [json_file] = tmp_path.glob("train-cpu-quick-*.json")
    rows = json.loads(json_file.read_text())["rows"]
    assert [(row["encoding"], row["seed"]) for row in rows] == [("rope", 0), ("rope", 1)]
    for row in rows:
        assert row["tok_per_s"] > 0 and row["process_seconds"] > row["train_seconds"] > 0
        assert row["bench"] == ["compiled", 20000.0]  # the auto kernel's row, compiled
        assert f"| {row['tok_per_s'] / 20000:.2f} |" in json_file.with_suffix(".md").read_text()


def test_records_packs_the_completed_runs_without_checkpoints_and_the_reports(tmp_path):
    """scripts/records.sh: what a lent GPU returns to be committed (scripts/gpu.sh)."""
    import tarfile

    exp = tmp_path / "root" / "reproduce-gpu"
    for name, status in (("done", "completed"), ("cut", "interrupted")):
        (exp / name).mkdir(parents=True)
        (exp / name / "run.json").write_text(json.dumps({"status": status}, indent=1))
        (exp / name / "checkpoint.pt").write_bytes(b"weights")
        (exp / name / "eval.json").write_text("{}")
    (exp / "report" / "tokens-2M").mkdir(parents=True)
    (exp / "report" / "verdicts.md").write_text("verdicts")
    (exp / ".locks").mkdir()
    r = subprocess.run(["bash", str(RECORDS), str(tmp_path / "root"), "reproduce-gpu",
                        str(tmp_path / "records.tgz")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "1 completed runs, 1 reports" in r.stdout
    with tarfile.open(tmp_path / "records.tgz") as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
    assert names == {"reproduce-gpu/done/run.json", "reproduce-gpu/done/eval.json",
                     "reproduce-gpu/report/verdicts.md"}
    missing = subprocess.run(["bash", str(RECORDS), str(tmp_path), "nothing", "x.tgz"],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "no experiment nothing" in missing.stderr
