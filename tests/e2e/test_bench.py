"""scripts/bench.py --quick: the structure of what it writes (never its speed)."""
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"


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
