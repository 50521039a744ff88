"""Runs `moegemm run --backend cpu --json` on a reduced workload and checks the document against the schema of
docs/cli.md ("moegemm-run/1"), and its values against the run's shapes. Standard library only.

usage: check_run_json.py MOEGEMM_BINARY OUTPUT_DIR
"""

import json
import subprocess
import sys
from pathlib import Path

NUM = (int, float)
OPT_NUM = (int, float, type(None))

OUTPUT = {"name": str, "elements": int, "max_abs_err": OPT_NUM, "rel_frobenius": OPT_NUM, "mismatches": int,
          "passed": bool}
VERIFICATION = {"oracle": str, "rows": int, "experts": int, "passed": bool, "max_abs_err": OPT_NUM,
                "outputs": [OUTPUT]}
OP = {"op": str, "function": str, "M": int, "N": int, "K": int, "flops": NUM, "status": str,
      "error": (str, type(None)), "time_us": OPT_NUM, "tflops": OPT_NUM, "dense_time_us": OPT_NUM,
      "dense_tflops": OPT_NUM, "fraction_of_dense": OPT_NUM, "verification": (VERIFICATION, type(None)),
      "passed": bool}
MODEL = {"name": str, "tokens": int, "top_k": int, "experts": int, "hidden": int, "intermediate": int, "rows": int,
         "group_sizes": [int], "passed": bool, "ops": [OP]}
DOCUMENT = {"schema": str, "moegemm_version": str, "backend": str, "device": str, "date": str, "routing": str,
            "seed": int, "reduced": bool, "timing": {"warmup": int, "iters": int, "method": str},
            "tolerances": {"max_rel_frobenius": NUM, "rtol": NUM, "atol": NUM}, "passed": bool, "models": [MODEL]}


def check(value, schema, where="$"):
    """Raises AssertionError naming the first place where `value` does not fit `schema`."""
    if isinstance(schema, dict):
        assert isinstance(value, dict), f"{where}: expected an object, got {type(value).__name__}"
        assert set(value) == set(schema), f"{where}: keys {sorted(value)} != {sorted(schema)}"
        for key, sub in schema.items():
            check(value[key], sub, f"{where}.{key}")
    elif isinstance(schema, list):
        assert isinstance(value, list), f"{where}: expected an array"
        for i, item in enumerate(value):
            check(item, schema[0], f"{where}[{i}]")
    elif isinstance(schema, tuple) and any(isinstance(s, dict) for s in schema):
        if value is not None:
            check(value, next(s for s in schema if isinstance(s, dict)), where)
    else:
        kinds = schema if isinstance(schema, tuple) else (schema,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        assert ok, f"{where}: expected {kinds}, got {value!r}"


def main() -> int:
    binary, out_dir = sys.argv[1], Path(sys.argv[2])
    path = out_dir / "run.json"
    path.unlink(missing_ok=True)
    cmd = [binary, "run", "--backend", "cpu", "--tokens", "24", "--routing", "zipf", "--seed", "5", "--json", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "no CUDA GPU found" in proc.stdout or "--backend cpu" in proc.stdout, proc.stdout
    assert "[1/4] mixtral-8x7b:" in proc.stderr, "no progress lines on stderr"

    doc = json.loads(path.read_text())
    check(doc, DOCUMENT)
    assert doc["schema"] == "moegemm-run/1"
    assert doc["backend"] == "cpu" and doc["reduced"] is True and doc["passed"] is True
    assert doc["routing"] == "zipf" and doc["seed"] == 5
    assert [m["name"] for m in doc["models"]] == ["mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b"]
    functions = ["grouped_gemm_glu", "grouped_gemm", "grouped_gemm_dglu", "grouped_gemm", "grouped_gemm_wgrad",
                 "grouped_gemm_wgrad"]
    for m in doc["models"]:
        assert m["tokens"] == 24 and m["rows"] == 24 * m["top_k"]
        assert len(m["group_sizes"]) == m["experts"] and sum(m["group_sizes"]) == m["rows"]
        assert min(m["group_sizes"]) >= 0
        assert [op["function"] for op in m["ops"]] == functions
        h, i, rows = m["hidden"], m["intermediate"], m["rows"]
        assert (m["ops"][0]["M"], m["ops"][0]["N"], m["ops"][0]["K"]) == (rows, 2 * i, h)
        assert (m["ops"][1]["M"], m["ops"][1]["N"], m["ops"][1]["K"]) == (rows, h, i)
        for op in m["ops"]:
            assert op["flops"] == 2 * op["M"] * op["N"] * op["K"]
            assert op["status"] == "ok" and op["passed"] is True, op
            # The CPU backend measures no GPU: no dense rate, no fraction of it.
            assert op["dense_time_us"] is None and op["fraction_of_dense"] is None
            assert op["time_us"] is not None and op["time_us"] > 0
            v = op["verification"]
            assert v["oracle"] == "double spot check" and v["passed"] and v["rows"] > 0
            for out in v["outputs"]:
                assert out["elements"] > 0 and out["mismatches"] == 0
                assert out["rel_frobenius"] < doc["tolerances"]["max_rel_frobenius"]
    print(f"{path}: schema moegemm-run/1 ok, {len(doc['models'])} models verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
