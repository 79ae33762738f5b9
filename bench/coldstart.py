"""Table d: a cold-start proxy for each Lambda function: handler import time, and what CDK would upload.

Import time: `import handler` from functions/<name>/ in a fresh interpreter (`python -X importtime`),
timed with perf_counter around the import, several times, median. The environment is a Lambda's
(the variables the stack sets, AWS_LAMBDA_FUNCTION_NAME, placeholder resource names): the import
builds the adapters and services at module scope as on AWS, without calling AWS. Two columns:
- "bytecode": every module has its .pyc (a warm disk; what a developer machine measures);
- "layer without .pyc": the layer's packages (jobsched as the layer holds it, its dependencies
  copied from this environment) are imported from a folder without bytecode, with writing it off,
  as on Lambda, where the layer is built with --no-compile and /opt is read-only, so every cold
  start compiles them; the runtime's own modules (stdlib, boto3) keep theirs, as on Lambda.

Upload sizes: the layer is built as `make synth` builds it (jobsched_infra.layer.build_layer: the
jobsched package plus its runtime dependencies as arm64/cp312 wheels), into a temporary folder; each
function's asset is its functions/<name>/ folder. Each is zipped with zipfile (deflate, default
level; __pycache__ and *.pyc excluded, as the CDK assets exclude them).

Which imports dominate: for the worker, -X importtime's cumulative time of each module (median over
the repetitions), the handler's direct imports, and self time summed per top-level package.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import ROOT, say, table

NAME = "coldstart"
FUNCTIONS = ROOT / "functions"
EXCLUDED = ("__pycache__",)
EXCLUDED_SUFFIXES = (".pyc",)
PROBE = "import time; t = time.perf_counter(); import handler; print(time.perf_counter() - t)"


def lambda_env(name: str) -> dict[str, str]:
    """What a deployed function's process sees (placeholders for the stack's resource names)."""
    from jobsched import constants as c

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBSCHED_", "POWERTOOLS_"))}
    env.pop("AWS_ENDPOINT_URL", None)
    env.pop("PYTHONPATH", None)
    env.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_LAMBDA_FUNCTION_NAME": f"jobsched-{name}",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
            "POWERTOOLS_SERVICE_NAME": f"jobsched-{name}",
            "POWERTOOLS_METRICS_NAMESPACE": "jobsched",
            c.JOBS_TABLE_ENV: "jobsched-jobs",
            c.RUNS_TABLE_ENV: "jobsched-runs",
            c.EXECUTION_QUEUE_URL_ENV: "https://sqs.us-east-1.amazonaws.com/000000000000/jobsched-exec",
            c.EXECUTION_DLQ_URL_ENV: "https://sqs.us-east-1.amazonaws.com/000000000000/jobsched-dlq",
            c.FAILURE_WORKFLOW_ARN_ENV: "arn:aws:states:us-east-1:000000000000:stateMachine:failure",
            c.DAG_WORKFLOW_ARN_ENV: "arn:aws:states:us-east-1:000000000000:stateMachine:dag",
            c.ALERT_TOPIC_ARN_ENV: "arn:aws:sns:us-east-1:000000000000:alerts",
            c.SHARD_COUNT_ENV: "16",
            c.TRUSTED_SENDERS_ENV: "AROASTACKWORKER,AROASTACKDISPATCHER",
        }
    )
    return env


def functions() -> list[str]:
    return sorted(p.parent.name for p in FUNCTIONS.glob("*/handler.py"))


def import_once(name: str, env: dict[str, str]) -> tuple[float, str]:
    """Seconds `import handler` took in a fresh interpreter, and its -X importtime report."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", PROBE],
        cwd=FUNCTIONS / name,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"coldstart: importing functions/{name}/handler.py failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1]), out.stderr


def parse_importtime(report: str) -> list[tuple[int, str, float, float]]:
    """(depth, module, self s, cumulative s) per line of a -X importtime report."""
    rows = []
    for line in report.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line[len("import time:") :].split("|", 2)
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((depth, name.strip(), int(self_us) / 1e6, int(cumulative_us) / 1e6))
    return rows


def dominant_imports(reports: list[str], top: int = 5) -> dict[str, Any]:
    """The imports that dominate `import handler`, medians over the reports."""
    cumulative: dict[str, list[float]] = defaultdict(list)
    direct: dict[str, list[float]] = defaultdict(list)
    packages: dict[str, list[float]] = defaultdict(list)
    for report in reports:
        rows = parse_importtime(report)
        root = next((d for d, n, _, _ in rows if n == "handler"), 0)
        per_package: dict[str, float] = defaultdict(float)
        for depth, name, self_s, cum_s in rows:
            if name != "handler":
                cumulative[name].append(cum_s)
            if depth == root + 1:
                direct[name].append(cum_s)
            per_package[name.split(".")[0]] += self_s
        for package, seconds in per_package.items():
            packages[package].append(seconds)

    def ranked(values: dict[str, list[float]]) -> list[dict[str, Any]]:
        medians = {k: statistics.median(v) for k, v in values.items()}
        return [
            {"module": k, "seconds": round(v, 4)} for k, v in sorted(medians.items(), key=lambda kv: -kv[1])
        ][:top]

    return {
        "by_cumulative": ranked(cumulative),
        "direct_imports_of_handler": ranked(direct),
        "packages_by_self_time": ranked(packages),
    }


@contextmanager
def layer_dir() -> Iterator[tuple[Path, str]]:
    """The layer built as `make synth` builds it, in a temporary folder; and how it was built."""
    sys.path.insert(0, str(ROOT / "infra"))
    try:
        from jobsched_infra.layer import build_layer  # type: ignore[import-not-found]  # infra/ is on the path only here
    finally:
        sys.path.remove(str(ROOT / "infra"))
    with tempfile.TemporaryDirectory(prefix="jobsched-bench-layer-") as tmp:
        try:
            built, how = build_layer(Path(tmp) / "layer", with_dependencies=True), "with dependencies"
        except subprocess.CalledProcessError:
            say("  coldstart: could not download the layer's dependencies; sizing jobsched alone")
            built, how = build_layer(Path(tmp) / "layer", with_dependencies=False), "jobsched only"
        yield built, how


def zipped(folder: Path) -> dict[str, int]:
    """Bytes of `folder` zipped (deflate, default level) and unzipped, and its file count."""
    files = [
        p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part in EXCLUDED for part in p.parts) and p.suffix not in EXCLUDED_SUFFIXES
    ]
    with tempfile.TemporaryFile() as buffer:
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, path.relative_to(folder).as_posix())
        size = buffer.tell()
    return {"zipped_bytes": size, "unzipped_bytes": sum(p.stat().st_size for p in files), "files": len(files)}


def source_only_layer(layer: Path, into: Path) -> Path:
    """This environment's copy of every top-level package the layer holds, without bytecode."""
    site = Path(sysconfig.get_paths()["purelib"])
    names = [
        p.name
        for p in (layer / "python").iterdir()
        if not p.name.endswith((".dist-info", "-stubs")) and p.name != "bin"
    ]
    into.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in names:
        # jobsched as the layer holds it (no tools); its dependencies from this environment
        source = layer / "python" / "jobsched" if name == "jobsched" else site / name
        if not source.exists():
            say(f"  coldstart: {name} is in the layer but not in this environment; left out")
            continue
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=ignore)
        else:
            shutil.copy2(source, into / name)
    return into


def run(quick: bool = False, *, repetitions: int | None = None) -> dict[str, Any]:
    """Import times, upload sizes and the worker's dominant imports; what coldstart.json holds."""
    repetitions = repetitions or (3 if quick else 5)
    began = time.monotonic()
    names = functions()
    results: dict[str, Any] = {"quick": quick, "repetitions": repetitions, "functions": {}}
    with layer_dir() as (layer, how), tempfile.TemporaryDirectory(prefix="jobsched-bench-src-") as tmp:
        results["layer"] = {"built": how, **zipped(layer)}
        sources = source_only_layer(layer, Path(tmp) / "site")
        worker_reports: list[str] = []
        for name in names:
            env = lambda_env(name)
            import_once(name, env)  # writes any missing .pyc: the "bytecode" column starts warm
            warm = []
            for _ in range(repetitions):
                seconds, report = import_once(name, env)
                warm.append(seconds)
                if name == "worker":
                    worker_reports.append(report)
            raw = {**env, "PYTHONPATH": str(sources), "PYTHONDONTWRITEBYTECODE": "1"}
            cold = [import_once(name, raw)[0] for _ in range(repetitions)]
            results["functions"][name] = {
                "import_s": round(statistics.median(warm), 4),
                "import_s_min": round(min(warm), 4),
                "import_s_layer_without_pyc": round(statistics.median(cold), 4),
                **zipped(FUNCTIONS / name),
            }
            say(f"  coldstart: {name} done")
        results["worker_imports"] = dominant_imports(worker_reports)
    results["seconds"] = round(time.monotonic() - began, 1)
    return results


def render(results: dict[str, Any]) -> str:
    layer = results["layer"]
    rows = [
        [
            name,
            f"{f['import_s']:.3f}",
            f"{f['import_s_layer_without_pyc']:.3f}",
            f"{f['zipped_bytes']:,}",
            f"{f['unzipped_bytes']:,}",
        ]
        for name, f in results["functions"].items()
    ]
    rows.append(
        [f"layer ({layer['built']})", "", "", f"{layer['zipped_bytes']:,}", f"{layer['unzipped_bytes']:,}"]
    )
    head = (
        "d. Cold-start proxy: `import handler` in a fresh interpreter, median of "
        f"{results['repetitions']}, seconds; upload sizes in bytes"
    )
    main = table(
        ["function", "import s (bytecode)", "import s (layer without .pyc)", "zipped", "unzipped"], rows
    )
    imports = results["worker_imports"]
    parts = [head, "", main, ""]
    for key, title in (
        ("by_cumulative", "worker: top modules by cumulative import time"),
        ("direct_imports_of_handler", "worker: handler.py's direct imports by cumulative time"),
        ("packages_by_self_time", "worker: top-level packages by self time"),
    ):
        parts += [table([title, "s"], [[r["module"], f"{r['seconds']:.3f}"] for r in imports[key]]), ""]
    return "\n".join(parts).rstrip()
