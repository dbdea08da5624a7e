"""scripts/bench.py --quick: the structure of what it writes (never its speed)."""

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench.py"


def test_quick_benchmark_writes_json_and_markdown(tmp_path):
    r = subprocess.run([sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    [json_file] = tmp_path.glob("bench-cpu-quick-*.json")
    result = json.loads(json_file.read_text())
    assert result["setup"]["device"] == "cpu" and result["setup"]["peak_tflops"] > 0
    assert [row["encoding"] for row in result["rows"]] == [
        "nope", "learned", "sinusoidal", "rope", "alibi"]
    for row in result["rows"]:
        t = row["train"]["eager"]
        assert t["tok_per_s"] > 0 and 0 < t["mfu"] < 1.5 and t["peak_gib"] > 0
        assert [e["length"] for e in row["eval"]] == [256, 1024]
        learned = row["encoding"] == "learned"
        assert [e["applicable"] for e in row["eval"]] == [not learned, not learned]
    md = json_file.with_suffix(".md").read_text()
    assert md.count("| eager |") == 5 and "measured matmul peak" in md
